"""Remote agents' turns: the hub offers a pending turn and waits for ``speak`` / ``no_reply``;
a missed deadline follows the channel's policy; a superseded turn cannot be answered (C10, C11).

The deadline tests wait for a real 0.2 s turn timeout: the timeout is the feature under test."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.channels import PendingTurn
from parley.core.errors import Conflict, NotFound, ParleyError, PermissionDenied
from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.conversations.turns import turns_topic
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.discussion_support import eventually, invocations, messages, within

DEADLINE_S = 0.2


async def remote(make_agent: MakeAgent, name: str = "rem") -> AgentHandle:
    return await make_agent(name, runtime={"kind": "remote"})


async def group(
    hub: Hub, operator: Principal, members: list[str], rounds: int = 1, **spec: Any
) -> str:
    channel = await hub.channels.create(
        operator, ChannelSpec(name="g", members=members, discussion_rounds=rounds, **spec)
    )
    return channel.id


async def next_turn(hub: Hub, agent: AgentHandle) -> PendingTurn:
    turn = await hub.turns.next(agent.principal, timeout_s=15)
    assert turn is not None, "no turn was offered"
    return turn


async def refused(call: Any) -> ParleyError:
    with pytest.raises(ParleyError) as caught:
        await call
    return caught.value


async def test_a_remote_member_gets_a_pending_turn_and_speaks(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    rem = await remote(make_agent)
    channel_id = await group(hub, operator, ["rem"])
    posted = await hub.channels.post(operator, channel_id, "what do you think?")
    turn = await next_turn(hub, rem)
    assert (turn.agent_id, turn.channel_id, turn.task_id, turn.round, turn.status) == (
        "rem",
        channel_id,
        posted.task_id,
        1,
        "pending",
    )
    assert "## User task\nwhat do you think?" in turn.prompt["user"]
    assert "You are rem" in turn.prompt["system"]
    notices = await hub.mail.inbox(operator, "rem", InboxFilter(kind="notice"))
    assert [n.payload["turn_id"] for n in notices] == [turn.id]
    answered = await hub.turns.speak(rem.principal, turn.id, "I think we should ship.")
    assert (answered.status, answered.answer) == ("answered", "I think we should ship.")
    await hub.tasks.wait_idle()
    stored = await messages(hub, channel_id)
    assert [(m.sender_id, m.content) for m in stored] == [
        ("operator", "what do you think?"),
        ("rem", "I think we should ship."),
    ]
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert (task.end_reason, task.accepted) == ("max_rounds", 1)
    [inv] = await invocations(hub, task.id)
    assert (inv.id, inv.outcome, inv.model_route) == (turn.id, "accepted", "remote:rem")
    # An answered turn cannot be answered again.
    error = await refused(hub.turns.speak(rem.principal, turn.id, "again"))
    assert isinstance(error, Conflict) and error.code == "turn_answered"


async def test_remote_turns_over_rest(hub: Hub, operator: Principal, api: Any) -> None:
    r = await api(hub.operator_token).post(
        "/v1/agents", json={"id": "rem", "runtime": {"kind": "remote"}}
    )
    token = r.json()["token"]
    channel_id = await group(hub, operator, ["rem"], rounds=2)
    client = api(token)
    r = await client.get("/v1/turns/next", params={"timeout_s": 0})
    assert r.status_code == 204
    await hub.channels.post(operator, channel_id, "go")
    r = await client.get("/v1/turns/next", params={"timeout_s": 15})
    assert r.status_code == 200, r.text
    r = await client.post(f"/v1/turns/{r.json()['id']}/speak", json={"text": "first"})
    assert r.status_code == 200, r.text
    r = await client.get("/v1/turns/next", params={"timeout_s": 15})
    assert r.json()["round"] == 2
    r = await client.post(f"/v1/turns/{r.json()['id']}/no_reply")
    assert (r.status_code, r.json()["answer"]) == (200, "NO_REPLY")
    await hub.tasks.wait_idle()
    assert [m.content for m in await messages(hub, channel_id)] == ["go", "first"]


async def test_no_reply_passes_the_turn(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    rem = await remote(make_agent)
    channel_id = await group(hub, operator, ["rem"], rounds=3)
    posted = await hub.channels.post(operator, channel_id, "anything?")
    turn = await next_turn(hub, rem)
    await hub.turns.no_reply(rem.principal, turn.id)
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert (task.end_reason, task.calls, task.accepted) == ("dormant", 1, 0)
    assert [m.content for m in await messages(hub, channel_id)] == ["anything?"]
    assert [i.outcome for i in await invocations(hub, task.id)] == ["silent"]


async def test_a_missed_deadline_fails_the_task_naming_the_member(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    rem = await remote(make_agent)
    channel_id = await group(
        hub, operator, ["rem"], turn_timeout_s=DEADLINE_S, missed_turn_policy="fail"
    )
    posted = await hub.channels.post(operator, channel_id, "answer in time")
    turn = await next_turn(hub, rem)
    await hub.tasks.wait_idle()  # nobody answers: the deadline passes
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert (task.end_reason, task.failed_member) == ("failed", "rem")
    assert task.error is not None and "did not answer" in task.error
    [inv] = await invocations(hub, task.id)
    assert (inv.outcome, inv.reason, inv.model_route) == ("failed", "runtime_timeout", "remote:rem")
    error = await refused(hub.turns.speak(rem.principal, turn.id, "too late"))
    assert isinstance(error, Conflict) and error.code == "turn_expired"
    assert [m.content for m in await messages(hub, channel_id)] == ["answer in time"]


async def test_a_missed_deadline_with_policy_no_reply_continues(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    rem = await remote(make_agent)
    await make_agent("alpha", runtime={"kind": "scripted"})
    runtimes.set("alpha", ScriptedRuntime(["alpha speaks"]))
    channel_id = await group(
        hub, operator, ["rem", "alpha"], turn_timeout_s=DEADLINE_S, missed_turn_policy="no_reply"
    )
    posted = await hub.channels.post(operator, channel_id, "go")
    await next_turn(hub, rem)
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert (task.end_reason, task.failed_member, task.calls, task.accepted) == (
        "max_rounds",
        None,
        2,
        1,
    )
    assert [(m.sender_id, m.content) for m in await messages(hub, channel_id)] == [
        ("operator", "go"),
        ("alpha", "alpha speaks"),
    ]
    assert [(i.agent_id, i.outcome) for i in await invocations(hub, task.id)] == [
        ("rem", "silent"),
        ("alpha", "accepted"),
    ]


async def test_answering_a_superseded_turn_is_refused(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    rem = await remote(make_agent)
    channel_id = await group(hub, operator, ["rem"])
    u1 = await hub.channels.post(operator, channel_id, "U1")
    old = await next_turn(hub, rem)
    assert old.task_id == u1.task_id
    u2 = await hub.channels.post(operator, channel_id, "U2")
    error = await refused(hub.turns.speak(rem.principal, old.id, "answer to U1"))
    assert isinstance(error, Conflict) and error.code == "new_message"
    new = await next_turn(hub, rem)
    assert new.task_id == u2.task_id
    await hub.turns.speak(rem.principal, new.id, "answer to U2")
    await hub.tasks.wait_idle()
    stored = await messages(hub, channel_id)
    assert [(m.sender_id, m.content) for m in stored] == [
        ("operator", "U1"),
        ("operator", "U2"),
        ("rem", "answer to U2"),
    ]
    first = await hub.tasks.get(operator, u1.task_id or "")
    assert first.end_reason == "superseded"
    assert [(i.outcome, i.reason) for i in await invocations(hub, first.id)] == [
        ("rejected", "new_message")
    ]
    async with hub.store.read() as tx:
        row = await tx.get("pending_turns", old.id)
    assert row.status == "superseded"


async def test_a_turn_superseded_before_it_is_offered_is_never_offered(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    rem = await remote(make_agent)
    channel_id = await group(hub, operator, ["rem"])
    parked: asyncio.Queue[Turn] = asyncio.Queue()
    release = asyncio.Event()
    seen: list[Turn] = []

    async def before_call(turn: Turn) -> None:
        if not seen:  # park only the very first call, before the hub offers it
            seen.append(turn)
            await parked.put(turn)
            await release.wait()

    hub.tasks.before_call = before_call
    u1 = await hub.channels.post(operator, channel_id, "U1")
    await within(parked.get(), "the first call")
    u2 = await hub.channels.post(operator, channel_id, "U2")
    release.set()
    turn = await next_turn(hub, rem)
    assert turn.task_id == u2.task_id
    await hub.turns.speak(rem.principal, turn.id, "on U2")
    await hub.tasks.wait_idle()
    async with hub.store.read() as tx:
        p = tx.table("pending_turns").c
        offered = await tx.select("pending_turns", p.agent_id == "rem")
    assert [t.task_id for t in offered] == [u2.task_id]
    notices = await hub.mail.inbox(operator, "rem", InboxFilter(kind="notice"))
    assert [n.payload["turn_id"] for n in notices] == [turn.id]
    first = await hub.tasks.get(operator, u1.task_id or "")
    assert first.end_reason == "superseded"
    assert [(i.outcome, i.reason) for i in await invocations(hub, first.id)] == [
        ("rejected", "new_message")
    ]


async def test_waiting_for_a_turn_outlasts_a_nudge_that_brings_none(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    """A live event whose turn is already gone (superseded, answered) must not end the long
    poll early: the wait goes on until a turn is there or the timeout passes."""
    rem = await remote(make_agent)
    channel_id = await group(hub, operator, ["rem"])
    waiting = asyncio.create_task(hub.turns.next(rem.principal, timeout_s=15))
    counter = getattr(hub.bus, "subscriber_count", None)
    assert counter is not None

    async def subscribed() -> bool:
        return bool(counter(turns_topic("rem")) == 1)

    await eventually(subscribed, "the long poll to subscribe")
    await hub.bus.publish(turns_topic("rem"), {"type": "turn", "turn": {"id": "gone"}})
    posted = await hub.channels.post(operator, channel_id, "now a real turn")
    turn = await within(waiting, "the long poll")
    assert turn is not None and turn.task_id == posted.task_id
    await hub.turns.no_reply(rem.principal, turn.id)
    await hub.tasks.wait_idle()


async def test_only_the_agent_whose_turn_it_is_may_answer(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    rem = await remote(make_agent)
    other = await remote(make_agent, "other")
    channel_id = await group(hub, operator, ["rem", "other"])
    await hub.channels.post(operator, channel_id, "go")
    turn = await next_turn(hub, rem)
    error = await refused(hub.turns.speak(other.principal, turn.id, "I answer for rem"))
    assert isinstance(error, PermissionDenied) and error.code == "not_your_turn"
    r = await api(other.token).post(f"/v1/turns/{turn.id}/no_reply")
    assert (r.status_code, r.json()["code"]) == (403, "not_your_turn")
    error = await refused(hub.turns.speak(rem.principal, "no-such-turn", "x"))
    assert isinstance(error, NotFound) and error.code == "turn_not_found"
    await hub.turns.speak(rem.principal, turn.id, "mine")
    second = await next_turn(hub, other)
    await hub.turns.no_reply(other.principal, second.id)
    await hub.tasks.wait_idle()
    assert [m.sender_id for m in await messages(hub, channel_id)] == ["operator", "rem"]
