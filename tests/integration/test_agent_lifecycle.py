"""An agent's lifecycle after its creation: the operator changes its settings with the checks of
its creation, disables it (no turns, its mail waits) and enables it again, and archives it (gone
from lists and rooms, its tokens refused, its mail and transcripts kept, its id never reused)."""

from __future__ import annotations

from typing import Any

from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.rooms import RoomSpec
from tests.conftest import MakeAgent


async def event_types(hub: Hub, subject: str) -> list[str]:
    async with hub.store.read() as tx:
        e = tx.table("events").c
        rows = await tx.select("events", e.subject == subject, order_by=[e.time, e.id])
    return [row.type for row in rows]


async def group_replies(hub: Hub, operator: Principal, channel_id: str, text: str) -> list[str]:
    """Post ``text`` and return what agents answered to it."""
    posted = await hub.channels.post(operator, channel_id, text)
    await hub.tasks.wait_idle()
    messages = await hub.channels.messages(operator, channel_id)
    return [m.content for m in messages if m.sender_kind == "agent" and m.seq > posted.message.seq]


async def test_a_patch_fixes_an_agent_with_the_checks_of_its_creation(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    coder = await make_agent("coder")  # no runtime: it never answers
    helper = await make_agent("helper")
    group = await hub.channels.create(operator, ChannelSpec(name="fix", members=["coder"]))
    assert await group_replies(hub, operator, group.id, "anyone?") == []

    op = api(hub.operator_token)
    refused = await op.patch("/v1/agents/coder", json={"runtime": {"kind": "telepathy"}})
    assert (refused.status_code, refused.json()["code"]) == (400, "unknown_runtime")
    empty = await op.patch("/v1/agents/coder", json={})
    assert (empty.status_code, empty.json()["code"]) == (400, "empty_patch")
    by_agent = await api(helper.token).patch("/v1/agents/coder", json={"persona": "x"})
    assert (by_agent.status_code, by_agent.json()["code"]) == (403, "operator_only")
    missing = await op.patch("/v1/agents/nobody", json={"persona": "x"})
    assert (missing.status_code, missing.json()["code"]) == (404, "principal_not_found")

    fixed = await op.patch(
        "/v1/agents/coder",
        json={
            "runtime": {"kind": "scripted", "replies": ["fixed"]},
            "display_name": "Coder",
            "persona": "You write code.",
        },
    )
    assert fixed.status_code == 200, fixed.text
    view = fixed.json()
    assert (view["runtime"]["kind"], view["display_name"], view["persona"]) == (
        "scripted",
        "Coder",
        "You write code.",
    )
    stored = await hub.identity.require(coder.id)
    assert stored.runtime_kind == "scripted"
    assert await group_replies(hub, operator, group.id, "now?") == ["fixed"]
    assert "agent.updated" in await event_types(hub, "coder")


async def test_a_patched_workspace_may_not_overlap_another_agents(
    hub: Hub, make_agent: MakeAgent, api: Any, tmp_path: Any
) -> None:
    await make_agent("a", workspace=str(tmp_path / "a"))
    await make_agent("b", workspace=str(tmp_path / "b"))
    op = api(hub.operator_token)
    overlap = await op.patch("/v1/agents/b", json={"workspace": str(tmp_path / "a" / "sub")})
    assert overlap.status_code == 409, overlap.text
    own = await op.patch("/v1/agents/b", json={"workspace": str(tmp_path / "b")})
    assert own.status_code == 200, own.text
    moved = await op.patch("/v1/agents/b", json={"workspace": str(tmp_path / "c")})
    assert moved.json()["workspace"] == str((tmp_path / "c").resolve())


async def test_a_disabled_agent_gets_no_turns_and_its_mail_waits(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    await make_agent("echo", runtime={"kind": "scripted", "replies": ["one", "two"]})
    sender = await make_agent("sender")
    group = await hub.channels.create(operator, ChannelSpec(name="g", members=["echo"]))
    op = api(hub.operator_token)

    by_agent = await api(sender.token).post("/v1/agents/echo/disable")
    assert (by_agent.status_code, by_agent.json()["code"]) == (403, "operator_only")
    disabled = await op.post("/v1/agents/echo/disable")
    assert disabled.status_code == 200, disabled.text
    assert (disabled.json()["state"], disabled.json()["disabled"]) == ("disabled", True)

    assert await group_replies(hub, operator, group.id, "hello?") == []
    sent = await api(sender.token).post("/v1/mail", json={"to": "echo", "kind": "task"})
    assert sent.status_code == 201, sent.text
    inbox = await op.get("/v1/agents/echo/inbox")
    assert [m["id"] for m in inbox.json()] == [sent.json()["id"]]
    listed = {a["id"]: a["state"] for a in (await op.get("/v1/agents")).json()}
    assert listed["echo"] == "disabled"

    enabled = await op.post("/v1/agents/echo/enable")
    assert enabled.json()["state"] == "active"
    assert (await group_replies(hub, operator, group.id, "back?"))[:1] == ["one"]
    assert await event_types(hub, "echo") == [
        "agent.created",
        "agent.disabled",
        "agent.enabled",
    ]


async def test_an_archived_agent_is_gone_but_its_records_are_kept(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    old = await make_agent("old", runtime={"kind": "scripted", "replies": ["said"]})
    peer = await make_agent("peer")
    group = await hub.channels.create(operator, ChannelSpec(name="g", members=["old"]))
    assert await group_replies(hub, operator, group.id, "speak") == ["said"]
    room = await hub.rooms.create(operator, RoomSpec(name="r"))
    await hub.rooms.join(operator, room.id, "old")
    sent = await api(old.token).post("/v1/mail", json={"to": "peer", "kind": "task"})
    assert sent.status_code == 201, sent.text
    op = api(hub.operator_token)

    refused = await api(peer.token).post("/v1/agents/old/archive")
    assert (refused.status_code, refused.json()["code"]) == (403, "operator_only")
    archived = await op.post("/v1/agents/old/archive")
    assert archived.status_code == 200, archived.text
    assert (archived.json()["state"], archived.json()["active"]) == ("archived", False)

    assert "old" not in [a["id"] for a in (await op.get("/v1/agents")).json()]
    with_archived = await op.get("/v1/agents", params={"archived": "true"})
    assert "old" in [a["id"] for a in with_archived.json()]
    assert await hub.rooms.members(operator, room.id) == []
    own = await api(old.token).get("/v1/whoami")
    assert (own.status_code, own.json()["code"]) == (401, "invalid_token")
    # Its mail and its words stay where they were.
    inbox = await api(peer.token).get("/v1/agents/peer/inbox")
    assert [m["id"] for m in inbox.json()] == [sent.json()["id"]]
    said = [m.content for m in await hub.channels.messages(operator, group.id)]
    assert "said" in said
    # It gets no new mail, no turns, no changes and no new tokens; its id is not reused.
    to_it = await api(peer.token).post("/v1/mail", json={"to": "old", "kind": "task"})
    assert (to_it.status_code, to_it.json()["code"]) == (404, "recipient_not_found")
    assert await group_replies(hub, operator, group.id, "still there?") == []
    again = await op.post("/v1/agents", json={"id": "old"})
    assert (again.status_code, again.json()["code"]) == (409, "principal_archived")
    patched = await op.patch("/v1/agents/old", json={"persona": "x"})
    assert (patched.status_code, patched.json()["code"]) == (409, "principal_archived")
    token = await op.post("/v1/principals/old/tokens", json={})
    assert (token.status_code, token.json()["code"]) == (409, "principal_archived")
    types = await event_types(hub, "old")
    assert types[-1] == "agent.archived"
