"""M4: the operator manages everyone's mail (seed 004 gives the CEO full rights): it moves and
archives any message, and every such action is an event naming the operator and the owner."""

from __future__ import annotations

from typing import Any

from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import send
from tests.integration.test_mail_events import events_of


async def test_the_operator_moves_and_archives_an_agents_mail(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    assert hub.operator_token is not None
    op = api(hub.operator_token)
    moved = await send(hub, alice.principal, "bob", "task")
    for status in ("read", "in_progress"):
        r = await op.post(f"/v1/mail/{moved.id}/status", json={"status": status})
        assert (r.status_code, r.json()["status"]) == (200, status), r.text
    archived = await send(hub, alice.principal, "bob", "report")
    r = await op.post(f"/v1/mail/{archived.id}/archive", json={"label": "W18"})
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["archive_label"]) == ("closed", "W18")

    changes = [
        (e["actor"], e["payload"]["owner"], e["payload"]["from"], e["payload"]["to"])
        for mid in (moved.id, archived.id)
        for e in await events_of(api, hub.operator_token, f"message:{mid}")
        if e["type"] == "mail.status_changed"
    ]
    assert changes == [
        ("operator", "bob", "pending", "read"),
        ("operator", "bob", "read", "in_progress"),
        ("operator", "bob", "pending", "closed"),
    ]
    # The recipient finds its mail where the operator put it.
    bob_view = await hub.mail.get(await hub.identity.require("bob"), archived.id)
    assert bob_view.archive_label == "W18"


async def test_another_agent_still_may_not_move_someone_elses_mail(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    carol = await make_agent("carol")
    msg = await send(hub, alice.principal, "bob", "task")
    for token in (carol.token, alice.token):
        r = await api(token).post(f"/v1/mail/{msg.id}/archive", json={"label": "x"})
        assert (r.status_code, r.json()["code"]) == (403, "not_recipient")
        assert "'bob'" in r.json()["message"]
    assert (await hub.mail.get(await hub.identity.require("bob"), msg.id)).status == "pending"
