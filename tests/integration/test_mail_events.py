"""Every mail state change appends an event to the log (P4), visible to the operator only."""

from __future__ import annotations

from typing import Any

from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import send


async def events_of(api: Any, token: str, subject: str) -> list[dict[str, Any]]:
    r = await api(token).get("/v1/events", params={"subject": subject})
    assert r.status_code == 200, r.text
    events: list[dict[str, Any]] = r.json()
    return events


async def test_mail_changes_are_recorded_as_events(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    assert hub.operator_token is not None
    op = hub.operator_token
    msg = await send(hub, alice.principal, "bob", "task", correlation_id="tx-1")
    [sent] = await events_of(api, op, f"message:{msg.id}")
    assert (sent["type"], sent["actor"], sent["trace_id"]) == ("mail.sent", "alice", "tx-1")
    assert sent["payload"] == {"kind": "task", "to": "agent:bob", "recipients": ["bob"]}

    await api(bob.token).get("/v1/agents/bob/inbox")
    delivered = await events_of(api, op, "inbox:bob")
    assert [(e["type"], e["payload"]["ids"]) for e in delivered] == [("mail.delivered", [msg.id])]

    for status in ("read", "in_progress"):
        await hub.mail.update_status(bob.principal, msg.id, status)
    await hub.mail.archive(bob.principal, msg.id, "W1")
    changes = [e for e in await events_of(api, op, f"message:{msg.id}") if e["type"] != "mail.sent"]
    assert [(e["type"], e["actor"], e["payload"]["from"], e["payload"]["to"]) for e in changes] == [
        ("mail.status_changed", "bob", "delivered", "read"),
        ("mail.status_changed", "bob", "read", "in_progress"),
        ("mail.status_changed", "bob", "in_progress", "closed"),
    ]
    assert changes[-1]["payload"]["label"] == "W1"

    copy = await hub.mail.redeliver(await hub.identity.authenticate(op), msg.id)
    redelivered = (await events_of(api, op, f"message:{msg.id}"))[-1]
    assert (redelivered["type"], redelivered["actor"]) == ("mail.redelivered", "operator")
    assert redelivered["payload"] == {"copy": copy.id}

    clock.advance(86400)
    expired = await hub.mail.expire_due()
    assert [m.id for m in expired] == [copy.id]
    [expiry] = await events_of(api, op, f"message:{copy.id}")
    assert (expiry["type"], expiry["actor"]) == ("mail.expired", "system")

    r = await api(op).get("/v1/events", params={"type": "mail."})
    types = [e["type"] for e in r.json()]
    assert types == [
        "mail.sent",
        "mail.delivered",
        "mail.status_changed",
        "mail.status_changed",
        "mail.status_changed",
        "mail.redelivered",
        "mail.expired",
    ]


async def test_a_refused_change_records_no_event(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    msg = await send(hub, alice.principal, "bob")
    r = await api(alice.token).post(f"/v1/mail/{msg.id}/status", json={"status": "read"})
    assert r.status_code == 403
    assert hub.operator_token is not None
    assert [e["type"] for e in await events_of(api, hub.operator_token, f"message:{msg.id}")] == [
        "mail.sent"
    ]


async def test_only_the_operator_reads_the_event_log(api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    r = await api(alice.token).get("/v1/events")
    assert r.status_code == 403
    assert r.json()["code"] == "operator_only"
    r = await api(alice.token).get("/v1/events/stream")
    assert r.status_code == 403
