"""M3: the lifecycle moves forward only, by the recipient; closing archives; nobody deletes;
the operator redelivers a copy."""

from __future__ import annotations

from typing import Any

import pytest

from parley.core.errors import Conflict, PermissionDenied
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import send


async def test_the_recipient_moves_its_mail_forward_to_the_archive(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    msg = await send(hub, alice.principal, "bob", subject="work")
    b = api(bob.token)
    r = await b.get("/v1/agents/bob/inbox")
    # Fetching the inbox delivers the mail, and the response already says so.
    assert [(m["id"], m["status"]) for m in r.json()] == [(msg.id, "delivered")]
    r = await b.get(f"/v1/mail/{msg.id}")
    assert r.json()["status"] == "delivered"  # fetching the inbox delivered it
    assert r.json()["delivered_at"] is not None
    steps = []
    for status in ("read", "in_progress", "closed"):
        clock.advance(60)
        body: dict[str, Any] = {"status": status}
        if status == "closed":
            body["label"] = "W7"
        r = await b.post(f"/v1/mail/{msg.id}/status", json=body)
        assert r.status_code == 200, r.text
        steps.append(r.json())
    assert [s["status"] for s in steps] == ["read", "in_progress", "closed"]
    final = steps[-1]
    assert final["read_at"] < final["consumed_at"] < final["closed_at"]
    assert final["archive_label"] == "W7"
    # Archived mail leaves the open inbox but is kept and findable under its label.
    r = await b.get("/v1/agents/bob/inbox")
    assert r.json() == []
    r = await b.get("/v1/agents/bob/inbox", params={"label": "W7", "include_archived": "true"})
    assert [m["id"] for m in r.json()] == [msg.id]


async def test_closing_archives_under_the_wave_or_unlabelled(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    waved = await send(hub, alice.principal, "bob", labels=["fix:F-1", "wave:W18.2"])
    plain = await send(hub, alice.principal, "bob")
    closed_waved = await hub.mail.archive(bob.principal, waved.id, None)
    closed_plain = await hub.mail.update_status(bob.principal, plain.id, "closed")
    assert closed_waved.archive_label == "W18.2"
    assert closed_plain.archive_label == "unlabelled"


@pytest.mark.parametrize(
    ("path", "target"),
    [
        (["read"], "read"),
        (["in_progress"], "read"),
        (["closed"], "in_progress"),
        (["closed"], "read"),
    ],
)
async def test_mail_never_moves_backward(
    path: list[str], target: str, hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    msg = await send(hub, alice.principal, "bob")
    for status in path:
        await hub.mail.update_status(bob.principal, msg.id, status)
    with pytest.raises(Conflict) as info:
        await hub.mail.update_status(bob.principal, msg.id, target)
    assert info.value.code == "backward_transition"
    r = await api(bob.token).post(f"/v1/mail/{msg.id}/status", json={"status": target})
    assert r.status_code == 409
    assert r.json()["code"] == "backward_transition"
    r = await api(bob.token).get(f"/v1/mail/{msg.id}")
    assert r.json()["status"] == path[-1]


async def test_a_recipient_cannot_set_a_hub_status(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    msg = await send(hub, alice.principal, "bob")
    for status in ("pending", "delivered", "expired", "failed", "deleted"):
        r = await api(bob.token).post(f"/v1/mail/{msg.id}/status", json={"status": status})
        assert r.status_code == 400, status
        assert r.json()["code"] == "invalid_status"


async def test_only_the_recipient_moves_its_mail(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    carol = await make_agent("carol")
    msg = await send(hub, alice.principal, "bob")
    assert hub.operator_token is not None
    # The operator may (test_mail_operator_manages.py); the sender and a stranger may not.
    for token in (alice.token, carol.token):
        for path, body in (("status", {"status": "read"}), ("archive", {"label": "x"})):
            r = await api(token).post(f"/v1/mail/{msg.id}/{path}", json=body)
            assert r.status_code == 403, r.text
            assert r.json()["code"] == "not_recipient"
    with pytest.raises(PermissionDenied):
        await hub.mail.update_status(alice.principal, msg.id, "closed")
    r = await api(hub.operator_token).get(f"/v1/mail/{msg.id}")
    assert r.json()["status"] == "pending"


async def test_nobody_can_delete_mail(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    msg = await send(hub, alice.principal, "bob")
    assert hub.operator_token is not None
    paths = [
        f"/v1/mail/{msg.id}",
        "/v1/agents/bob/inbox",
        f"/v1/mail/{msg.id}/archive",
        f"/v1/mail/{msg.id}/status",
    ]
    for token in (bob.token, alice.token, hub.operator_token):
        for path in paths:
            r = await api(token).delete(path)
            assert r.status_code in (404, 405), (path, r.status_code)
            assert r.headers["content-type"].startswith("application/json")
            assert r.json()["code"] in ("method_not_allowed", "not_found")
    openapi = (await api(None).get("/openapi.json")).json()
    deletable = [p for p, ops in openapi["paths"].items() if "delete" in ops]
    assert not [p for p in deletable if "/mail" in p or "/inbox" in p]
    r = await api(bob.token).get(f"/v1/mail/{msg.id}")
    assert r.status_code == 200


async def test_operator_redelivers_a_copy_and_the_original_stays_archived(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    msg = await send(hub, alice.principal, "bob", subject="again", labels=["wave:W2"])
    await hub.mail.archive(bob.principal, msg.id, "W2")
    clock.advance(3600)
    assert hub.operator_token is not None
    r = await api(hub.operator_token).post(f"/v1/mail/{msg.id}/redeliver")
    assert r.status_code == 201, r.text
    copy = r.json()
    assert copy["id"] != msg.id
    assert (copy["status"], copy["copy_of"], copy["copy_reason"]) == (
        "pending",
        msg.id,
        "redeliver",
    )
    assert (copy["subject"], copy["from_id"], copy["recipient_id"]) == ("again", "alice", "bob")
    assert copy["closed_at"] is None and copy["archive_label"] is None
    original = (await api(bob.token).get(f"/v1/mail/{msg.id}")).json()
    assert (original["status"], original["archive_label"]) == ("closed", "W2")
    inbox = (await api(bob.token).get("/v1/agents/bob/inbox")).json()
    assert [m["id"] for m in inbox] == [copy["id"]]
    # The copy goes through its own lifecycle.
    r = await api(bob.token).post(f"/v1/mail/{copy['id']}/status", json={"status": "read"})
    assert r.status_code == 200


async def test_only_the_operator_redelivers(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    msg = await send(hub, alice.principal, "bob")
    await hub.mail.archive(bob.principal, msg.id, None)
    for token in (alice.token, bob.token):
        r = await api(token).post(f"/v1/mail/{msg.id}/redeliver")
        assert r.status_code == 403
        assert r.json()["code"] == "operator_only"
    assert len((await api(bob.token).get("/v1/agents/bob/inbox")).json()) == 0


async def test_only_archived_mail_is_redelivered(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    msg = await send(hub, alice.principal, "bob")
    await hub.mail.update_status(bob.principal, msg.id, "in_progress")
    assert hub.operator_token is not None
    r = await api(hub.operator_token).post(f"/v1/mail/{msg.id}/redeliver")
    assert r.status_code == 409
    assert r.json()["code"] == "not_archived"
    r = await api(hub.operator_token).post("/v1/mail/nope/redeliver")
    assert r.status_code == 404
    assert r.json()["code"] == "message_not_found"
