"""Deleting a group (source 003's room deletion) and changing its members and rounds through the
C14 group API: a deletion ends the running discussion as ``deleted`` and refuses its late reply
with ``room_deleted``, on the cancel path and at the commit check alike."""

from __future__ import annotations

from typing import Any

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import (
    Gate,
    as_another_hub,
    invocations,
    messages,
    within,
)


async def gated_group(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> tuple[str, Gate]:
    gate = Gate()

    async def alpha(turn: Turn) -> str:
        await gate.wait()
        return "alpha's late reply"

    await make_agent("alpha", runtime={"kind": "scripted"})
    runtimes.set("alpha", ScriptedRuntime(alpha))
    channel = await hub.channels.create(operator, ChannelSpec(name="room", members=["alpha"]))
    return channel.id, gate


async def test_deleting_a_group_ends_its_discussion_and_refuses_the_late_reply(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    channel_id, gate = await gated_group(hub, operator, make_agent, runtimes)
    posted = await hub.channels.post(operator, channel_id, "discuss this")
    await within(gate.entered.wait(), "alpha's call")
    assert hub.operator_token is not None
    r = await api(hub.operator_token).delete(f"/v1/im/sessions/{channel_id}")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "deleted"
    await hub.tasks.wait_idle()

    task = await hub.tasks.get(operator, posted.task_id or "")
    assert (task.status, task.end_reason) == ("finished", "deleted")
    trace = await invocations(hub, task.id)
    assert [(i.outcome, i.reason) for i in trace] == [("rejected", "room_deleted")]
    # Gone from every listing and read, but kept for the record.
    client = api(hub.operator_token)
    assert (await client.get(f"/v1/im/sessions/{channel_id}")).status_code == 404
    assert channel_id not in [c["id"] for c in (await client.get("/v1/channels")).json()]
    r = await client.post(f"/v1/channels/{channel_id}/messages", json={"content": "hello?"})
    assert (r.status_code, r.json()["code"]) == (404, "channel_not_found")
    assert [m.content for m in await messages(hub, channel_id)] == ["discuss this"]
    async with hub.store.read() as tx:
        [event] = await hub.ctx.events.query(tx, type="channel.deleted")
    assert (event.actor, event.subject) == ("operator", f"channel:{channel_id}")
    assert event.payload["tasks_stopped"] == [task.id]


async def test_a_reply_that_reaches_the_commit_after_the_deletion_is_room_deleted(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    """The deletion committed by another hub sets no cancel event here: the commit check alone
    refuses the reply, with the same code as the cancel path."""
    channel_id, gate = await gated_group(hub, operator, make_agent, runtimes)
    posted = await hub.channels.post(operator, channel_id, "discuss this")
    await within(gate.entered.wait(), "alpha's call")
    with as_another_hub(hub):
        await hub.channels.delete(operator, channel_id)
    gate.release.set()
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert task.end_reason == "deleted"
    trace = await invocations(hub, task.id)
    assert [(i.outcome, i.reason) for i in trace] == [("rejected", "room_deleted")]
    assert [m.content for m in await messages(hub, channel_id)] == ["discuss this"]


async def test_only_the_creator_or_the_operator_deletes_and_only_groups(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    owner = await make_agent("owner", runtime={"kind": "scripted"})
    other = await make_agent("other", runtime={"kind": "scripted"}, accepts_channels_from=["owner"])
    r = await api(owner.token).post("/v1/im/sessions", json={"name": "g", "members": ["other"]})
    assert r.status_code == 201, r.text
    group_id = r.json()["id"]
    r = await api(other.token).delete(f"/v1/im/sessions/{group_id}")
    assert (r.status_code, r.json()["code"]) == (403, "channel_owner_only")
    r = await api(owner.token).delete(f"/v1/channels/{owner.principal.work_channel_id}")
    assert (r.status_code, r.json()["code"]) == (409, "channel_not_deletable")
    outsider = await make_agent("outsider", runtime={"kind": "scripted"})
    r = await api(outsider.token).delete(f"/v1/channels/{group_id}")
    assert (r.status_code, r.json()["code"]) == (404, "channel_not_found")
    r = await api(owner.token).delete(f"/v1/channels/{group_id}")
    assert r.status_code == 200, r.text
    r = await api(owner.token).delete(f"/v1/channels/{group_id}")
    assert (r.status_code, r.json()["code"]) == (404, "channel_not_found")


async def test_patch_a_group_changes_members_and_rounds_with_consent(
    hub: Hub, make_agent: MakeAgent, api: Any
) -> None:
    owner = await make_agent("owner", runtime={"kind": "scripted"})
    await make_agent("willing", runtime={"kind": "scripted"}, accepts_channels_from=["owner"])
    await make_agent("unwilling", runtime={"kind": "scripted"})
    client = api(owner.token)
    r = await client.post("/v1/im/sessions", json={"name": "g", "discussion_rounds": 3})
    group_id = r.json()["id"]
    r = await client.patch(f"/v1/im/sessions/{group_id}", json={"members": ["unwilling"]})
    assert (r.status_code, r.json()["code"]) == (403, "membership_consent_required")
    r = await client.patch(
        f"/v1/im/sessions/{group_id}", json={"members": ["willing"], "discussion_rounds": 1}
    )
    assert r.status_code == 200, r.text
    assert (r.json()["members"], r.json()["discussion_rounds"]) == (["owner", "willing"], 1)
    r = await client.patch(f"/v1/im/sessions/{group_id}", json={"discussion_rounds": 9})
    assert (r.status_code, r.json()["code"]) == (400, "invalid_rounds")
