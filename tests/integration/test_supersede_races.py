"""Supersede (C10) under each interleaving of source 003 §4, driven by barriers: a newer message
arrives before the provider call, during it, between its return and the commit, or as a chain
U1 → U2 → U3; and a cancel through ``DELETE /v1/tasks/{id}``. Whatever the timing, no reply to
a trigger that is no longer the channel's latest is ever accepted."""

from __future__ import annotations

import asyncio
from typing import Any

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.channels import ChannelMessage, Task
from parley.core.identity import Principal
from parley.core.ports import Tx
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import (
    eventually,
    invocations,
    last_trigger,
    messages,
    within,
)

ROUNDS = 2
MEMBERS = ["alpha", "beta"]


class Blocker:
    """A scripted reply function that, while ``block`` is set, parks every call until
    ``release``; ``entered`` yields each parked turn in the order the calls began."""

    def __init__(self, block: bool = True) -> None:
        self.block = block
        self.entered: asyncio.Queue[Turn] = asyncio.Queue()
        self.release = asyncio.Event()

    async def __call__(self, turn: Turn) -> str:
        if self.block:
            await self.entered.put(turn)
            await self.release.wait()
        return f"{turn.agent.id} r{turn.round} on {turn.trigger_id}"


def plain(turn: Turn) -> str:
    return f"{turn.agent.id} r{turn.round} on {turn.trigger_id}"


async def setup(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, **fns: Any
) -> str:
    for name in MEMBERS:
        await make_agent(name, runtime={"kind": "scripted"})
        runtimes.set(name, ScriptedRuntime(fns.get(name, plain)))
    spec = ChannelSpec(name="race", members=MEMBERS, discussion_rounds=ROUNDS)
    return (await hub.channels.create(operator, spec)).id


def assert_no_stale_reply(stored: list[ChannelMessage]) -> None:
    """Every agent reply answers the trigger that was the channel's latest when it committed."""
    latest: str | None = None
    for message in stored:
        if message.trigger_id == message.id:
            latest = message.id
        elif message.sender_kind == "agent":
            assert message.trigger_id == latest, f"stale reply accepted: {message!r}"


async def assert_superseded(hub: Hub, operator: Principal, old: Task, *, rejected: int) -> None:
    done = await hub.tasks.get(operator, old.id)
    assert (done.status, done.end_reason) == ("finished", "superseded")
    trace = await invocations(hub, old.id)
    stale = [(i.outcome, i.reason) for i in trace if i.outcome != "accepted"]
    assert stale == [("rejected", "new_message")] * rejected
    assert done.calls == len(trace)


async def assert_runs_normally(hub: Hub, operator: Principal, task_id: str) -> None:
    task = await hub.tasks.get(operator, task_id)
    assert (task.end_reason, task.calls, task.accepted) == (
        "max_rounds",
        len(MEMBERS) * ROUNDS,
        len(MEMBERS) * ROUNDS,
    )
    replies = [m for m in await messages(hub, task.channel_id) if m.task_id == task_id]
    assert len(replies) == len(MEMBERS) * ROUNDS
    assert {m.trigger_id for m in replies} == {task.trigger_id}


async def test_u2_before_the_provider_call(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    channel_id = await setup(hub, operator, make_agent, runtimes)
    parked: asyncio.Queue[Turn] = asyncio.Queue()
    release = asyncio.Event()
    seen: list[Turn] = []

    async def before_call(turn: Turn) -> None:
        if not seen:  # park only the very first call
            seen.append(turn)
            await parked.put(turn)
            await release.wait()

    hub.tasks.before_call = before_call
    u1 = await hub.channels.post(operator, channel_id, "U1")
    turn = await within(parked.get(), "the first call")
    assert (turn.agent.id, turn.trigger_id) == ("alpha", u1.message.id)
    u2 = await hub.channels.post(operator, channel_id, "U2")
    release.set()
    await hub.tasks.wait_idle()

    old = await hub.tasks.get(operator, u1.task_id or "")
    await assert_superseded(hub, operator, old, rejected=1)
    await assert_runs_normally(hub, operator, u2.task_id or "")
    stored = await messages(hub, channel_id)
    assert [m for m in stored if m.trigger_id == u1.message.id] == [u1.message]
    assert_no_stale_reply(stored)
    assert await last_trigger(hub, channel_id) == u2.message.id


async def test_u2_during_the_provider_call(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    blocker = Blocker()
    # alpha's first reply commits before U2 (legal); beta is mid-call when U2 arrives.
    channel_id = await setup(hub, operator, make_agent, runtimes, beta=blocker)
    u1 = await hub.channels.post(operator, channel_id, "U1")
    turn = await within(blocker.entered.get(), "beta's call")
    assert (turn.agent.id, turn.trigger_id) == ("beta", u1.message.id)
    blocker.block = False
    u2 = await hub.channels.post(operator, channel_id, "U2")
    await hub.tasks.wait_idle()
    blocker.release.set()

    old = await hub.tasks.get(operator, u1.task_id or "")
    await assert_superseded(hub, operator, old, rejected=1)
    assert (old.calls, old.accepted) == (2, 1)
    await assert_runs_normally(hub, operator, u2.task_id or "")
    stored = await messages(hub, channel_id)
    on_u1 = [m for m in stored if m.trigger_id == u1.message.id]
    assert [m.sender_id for m in on_u1] == ["operator", "alpha"]
    assert all(m.seq < u2.message.seq for m in on_u1)
    assert_no_stale_reply(stored)
    assert await last_trigger(hub, channel_id) == u2.message.id


async def test_u2_between_the_return_and_the_commit(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    channel_id = await setup(hub, operator, make_agent, runtimes)
    parked: asyncio.Queue[Turn] = asyncio.Queue()
    release = asyncio.Event()
    seen: list[Turn] = []

    async def before_commit(turn: Turn) -> None:
        if not seen:  # park only the very first call
            seen.append(turn)
            await parked.put(turn)
            await release.wait()

    hub.tasks.before_commit = before_commit
    u1 = await hub.channels.post(operator, channel_id, "U1")
    turn = await within(parked.get(), "alpha's reply before its commit")
    assert (turn.agent.id, turn.trigger_id) == ("alpha", u1.message.id)
    u2 = await hub.channels.post(operator, channel_id, "U2")
    release.set()
    await hub.tasks.wait_idle()

    old = await hub.tasks.get(operator, u1.task_id or "")
    await assert_superseded(hub, operator, old, rejected=1)
    [rejected] = await invocations(hub, old.id)
    assert rejected.model_route == "scripted"  # the provider did answer; the commit refused it
    await assert_runs_normally(hub, operator, u2.task_id or "")
    stored = await messages(hub, channel_id)
    assert [m for m in stored if m.trigger_id == u1.message.id] == [u1.message]
    assert_no_stale_reply(stored)
    assert await last_trigger(hub, channel_id) == u2.message.id


async def test_the_commit_check_alone_refuses_a_reply_when_no_cancel_arrives(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    """A newer trigger written by another hub process sets no in-process cancel flag and no
    cancel_requested on this task; the check at the linearisation point still refuses."""
    channel_id = await setup(hub, operator, make_agent, runtimes)
    newer: list[ChannelMessage] = []

    async def before_commit(turn: Turn) -> None:
        if newer:
            return

        async def foreign_trigger(tx: Tx) -> ChannelMessage:
            return await hub.channels.append(
                tx,
                channel_id,
                sender_id="operator",
                sender_kind="human",
                content="U2 from elsewhere",
                trigger=True,
            )

        newer.append(await hub.store.write(foreign_trigger))

    hub.tasks.before_commit = before_commit
    u1 = await hub.channels.post(operator, channel_id, "U1")
    await hub.tasks.wait_idle()

    old = await hub.tasks.get(operator, u1.task_id or "")
    assert not old.cancel_requested
    await assert_superseded(hub, operator, old, rejected=1)
    stored = await messages(hub, channel_id)
    assert [m.content for m in stored] == ["U1", "U2 from elsewhere"]
    assert await last_trigger(hub, channel_id) == newer[0].id


async def test_a_chain_u1_u2_u3(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    blocker = Blocker()
    channel_id = await setup(hub, operator, make_agent, runtimes, alpha=blocker)
    u1 = await hub.channels.post(operator, channel_id, "U1")
    first = await within(blocker.entered.get(), "the call on U1")
    u2 = await hub.channels.post(operator, channel_id, "U2")
    second = await within(blocker.entered.get(), "the call on U2")
    assert (first.trigger_id, second.trigger_id) == (u1.message.id, u2.message.id)
    # U2's own task is superseded in turn while its first call is still waiting.
    blocker.block = False
    u3 = await hub.channels.post(operator, channel_id, "U3")
    blocker.release.set()
    await hub.tasks.wait_idle()

    for posted in (u1, u2):
        old = await hub.tasks.get(operator, posted.task_id or "")
        await assert_superseded(hub, operator, old, rejected=1)
    await assert_runs_normally(hub, operator, u3.task_id or "")
    stored = await messages(hub, channel_id)
    replies = [m for m in stored if m.sender_kind == "agent"]
    assert {m.trigger_id for m in replies} == {u3.message.id}
    assert_no_stale_reply(stored)
    assert await last_trigger(hub, channel_id) == u3.message.id
    tasks = await hub.tasks.of_channel(operator, channel_id)
    assert [(t.trigger_id, t.end_reason) for t in tasks] == [
        (u1.message.id, "superseded"),
        (u2.message.id, "superseded"),
        (u3.message.id, "max_rounds"),
    ]


async def test_cancel_through_rest_during_a_call(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    blocker = Blocker()
    channel_id = await setup(hub, operator, make_agent, runtimes, alpha=blocker)
    posted = await hub.channels.post(operator, channel_id, "U1")
    await within(blocker.entered.get(), "alpha's call")
    r = await api(hub.operator_token).delete(f"/v1/tasks/{posted.task_id}")
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["end_reason"]) == ("finished", "cancelled")
    blocker.release.set()
    await hub.tasks.wait_idle()
    trace = await invocations(hub, posted.task_id or "")
    assert [(i.agent_id, i.outcome, i.reason) for i in trace] == [
        ("alpha", "rejected", "cancelled")
    ]
    assert [m.content for m in await messages(hub, channel_id)] == ["U1"]
    assert await last_trigger(hub, channel_id) == posted.message.id
    # Cancelling a finished task changes nothing.
    r = await api(hub.operator_token).delete(f"/v1/tasks/{posted.task_id}")
    assert r.json()["end_reason"] == "cancelled"


async def test_cancel_between_the_return_and_the_commit(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    channel_id = await setup(hub, operator, make_agent, runtimes)
    parked: asyncio.Queue[Turn] = asyncio.Queue()
    release = asyncio.Event()

    async def before_commit(turn: Turn) -> None:
        await parked.put(turn)
        await release.wait()

    hub.tasks.before_commit = before_commit
    posted = await hub.channels.post(operator, channel_id, "U1")
    await within(parked.get(), "alpha's reply before its commit")
    deleting = asyncio.create_task(api(hub.operator_token).delete(f"/v1/tasks/{posted.task_id}"))

    async def cancel_recorded() -> bool:
        async with hub.store.read() as tx:
            row = await tx.get("tasks", posted.task_id or "")
        return bool(row.cancel_requested)

    await eventually(cancel_recorded, "the cancel to be recorded")
    release.set()
    r = await within(deleting, "the DELETE")
    assert (r.status_code, r.json()["end_reason"]) == (200, "cancelled")
    trace = await invocations(hub, posted.task_id or "")
    assert [(i.outcome, i.reason) for i in trace] == [("rejected", "cancelled")]
    assert [m.content for m in await messages(hub, channel_id)] == ["U1"]


async def test_only_members_or_the_operator_may_cancel(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    blocker = Blocker()
    channel_id = await setup(hub, operator, make_agent, runtimes, alpha=blocker)
    outsider = await make_agent("mallory")
    posted = await hub.channels.post(operator, channel_id, "U1")
    await within(blocker.entered.get(), "alpha's call")
    r = await api(outsider.token).delete(f"/v1/tasks/{posted.task_id}")
    assert (r.status_code, r.json()["code"]) == (403, "channel_forbidden")
    assert (await hub.tasks.get(operator, posted.task_id or "")).status == "running"
    await hub.tasks.cancel(operator, posted.task_id or "")
    blocker.release.set()
    await hub.tasks.wait_idle()
