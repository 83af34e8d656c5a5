"""Group discussions: rounds and prompts (C5), silence (C6), early end (C7), failure (C11),
snapshots (C12), invocation traces (C13) and what a restart does to a running task."""

from __future__ import annotations

from typing import Any

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.channels import TRANSCRIPT_WINDOW, Task
from parley.core.errors import InvalidRequest, RuntimeFailure
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.core.runtime import DONE_MARKER, NO_REPLY, Turn
from parley.service.conversations.channels import ChannelPatch, ChannelSpec
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import (
    Gate,
    invocations,
    messages,
    transcript_of,
    within,
)


async def agents(
    make_agent: MakeAgent, runtimes: StaticRuntimes, **scripts: Any
) -> dict[str, ScriptedRuntime]:
    """Create scripted agents, each with its own runtime so its prompts can be read."""
    out = {}
    for name, script in scripts.items():
        await make_agent(name, runtime={"kind": "scripted"})
        out[name] = ScriptedRuntime(script)
        runtimes.set(name, out[name])
    return out


async def group(hub: Hub, operator: Principal, members: list[str], rounds: int = 3) -> str:
    # Each group its own name: a name names one open channel.
    spec = ChannelSpec(name=f"g-{new_ulid()}", members=members, discussion_rounds=rounds)
    return (await hub.channels.create(operator, spec)).id


async def run(hub: Hub, operator: Principal, channel_id: str, content: str) -> Task:
    posted = await hub.channels.post(operator, channel_id, content)
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    return await hub.tasks.get(operator, posted.task_id)


def contents(turn: Turn) -> list[str]:
    return [entry["content"] for entry in transcript_of(turn)]


# -- C5 rounds and prompts ------------------------------------------------------------------------
async def test_questions_and_answers_reach_the_next_speakers_prompt(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    rt = await agents(
        make_agent,
        runtimes,
        alpha=["A1: track the EOF per canonical path", "R: pin a content hash per read"],
        beta=["Q: what if the file changes mid-read?", "Q2: and truncation?"],
    )
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=2)
    task = await run(hub, operator, channel_id, "Discuss read-integrity checks")
    assert (task.end_reason, task.calls, task.accepted) == ("max_rounds", 4, 4)
    alpha, beta = rt["alpha"].turns, rt["beta"].turns
    assert [t.round for t in alpha] == [1, 2] and [t.round for t in beta] == [1, 2]
    # beta sees alpha's hypothesis, alpha answers beta's question, beta sees the answer.
    assert "A1: track the EOF per canonical path" in contents(beta[0])
    assert "Q: what if the file changes mid-read?" not in contents(alpha[0])
    assert "Q: what if the file changes mid-read?" in contents(alpha[1])
    assert "R: pin a content hash per read" in contents(beta[1])
    for turn in (*alpha, *beta):
        assert turn.prompt.user_text().startswith("## User task\nDiscuss read-integrity checks\n")
        assert turn.trigger_id == task.trigger_id
    assert "This is round 1 of 2." in alpha[0].prompt.system
    assert "This is round 2 of 2." in beta[1].prompt.system
    assert "State your position" in alpha[0].prompt.instructions
    assert "State your position" not in alpha[1].prompt.instructions
    assert "Answer the questions the others asked you" in alpha[1].prompt.instructions
    entries = transcript_of(beta[1])
    assert all(set(e) == {"id", "speaker", "role", "content"} for e in entries)
    assert [(e["speaker"], e["role"]) for e in entries] == [
        ("Operator", "user"),
        ("alpha", "agent"),
        ("beta", "agent"),
        ("alpha", "agent"),
    ]
    stored = await messages(hub, channel_id)
    assert [e["id"] for e in entries] == [m.id for m in stored[:4]]


@pytest.mark.parametrize("rounds", [1, 3, 5])
async def test_rounds_make_exactly_n_times_r_calls_in_order(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, rounds: int
) -> None:
    calls: list[tuple[str, int | None]] = []

    def reply(turn: Turn) -> str:
        calls.append((turn.agent.id, turn.round))
        return f"{turn.agent.id} in round {turn.round}"

    await agents(make_agent, runtimes, alpha=reply, beta=reply, gamma=reply)
    channel_id = await group(hub, operator, ["alpha", "beta", "gamma"], rounds=rounds)
    task = await run(hub, operator, channel_id, "go")
    assert (task.rounds, task.end_reason, task.current_round) == (rounds, "max_rounds", rounds)
    assert calls == [(m, r) for r in range(1, rounds + 1) for m in ("alpha", "beta", "gamma")]
    assert (task.calls, task.accepted) == (3 * rounds, 3 * rounds)
    assert len(await messages(hub, channel_id)) == 1 + 3 * rounds


@pytest.mark.parametrize("rounds", [0, 6])
async def test_rounds_outside_one_to_five_are_refused(
    hub: Hub, operator: Principal, make_agent: MakeAgent, rounds: int
) -> None:
    await make_agent("alpha")
    with pytest.raises(InvalidRequest) as caught:
        await group(hub, operator, ["alpha"], rounds=rounds)
    assert caught.value.code == "invalid_rounds"
    channel_id = await group(hub, operator, ["alpha"], rounds=2)
    with pytest.raises(InvalidRequest) as caught:
        await hub.channels.update(operator, channel_id, ChannelPatch(discussion_rounds=rounds))
    assert caught.value.code == "invalid_rounds"


async def test_the_user_task_stays_when_it_leaves_the_transcript_window(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    gate = Gate()

    async def alpha(turn: Turn) -> str:
        await gate.wait()
        return "alpha speaks"

    rt = await agents(make_agent, runtimes, alpha=alpha, beta=lambda t: "beta speaks")
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=1)
    posted = await hub.channels.post(operator, channel_id, "ORIGINAL TASK: size the pool")
    await within(gate.entered.wait(), "alpha's call")
    # While alpha thinks, the channel grows past the window (replies, not new triggers).

    async def seed(tx: Tx) -> None:
        for i in range(TRANSCRIPT_WINDOW + 5):
            await hub.channels.append(
                tx,
                channel_id,
                sender_id="beta",
                sender_kind="agent",
                content=f"filler {i}",
                trigger_id=posted.message.id,
            )

    await hub.store.write(seed)
    gate.release.set()
    await hub.tasks.wait_idle()
    [first] = rt["alpha"].turns
    assert transcript_of(first)[0]["id"] == posted.message.id
    [late] = rt["beta"].turns
    entries = transcript_of(late)
    assert len(entries) == TRANSCRIPT_WINDOW
    assert posted.message.id not in {e["id"] for e in entries}
    assert entries[-1]["content"] == "alpha speaks"
    assert late.prompt.user_text().startswith("## User task\nORIGINAL TASK: size the pool\n")


# -- C6 silence in a group ------------------------------------------------------------------------
async def test_a_silent_round_ends_a_group_discussion_as_dormant(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    rt = await agents(make_agent, runtimes, alpha=[NO_REPLY], beta=[f"  {NO_REPLY}\n"])
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=3)
    task = await run(hub, operator, channel_id, "anything to add?")
    assert (task.end_reason, task.current_round, task.calls, task.accepted) == (
        "dormant",
        1,
        2,
        0,
    )
    assert len(rt["alpha"].turns) == len(rt["beta"].turns) == 1
    stored = await messages(hub, channel_id)
    assert [m.sender_id for m in stored] == ["operator"]  # no reminder in a group
    assert [i.outcome for i in await invocations(hub, task.id)] == ["silent", "silent"]
    channel = await hub.channels.get(operator, channel_id)
    assert channel.status == "active"


async def test_a_round_with_one_speaker_is_not_silent(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await agents(make_agent, runtimes, alpha=[NO_REPLY, NO_REPLY], beta=["one point", NO_REPLY])
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=3)
    task = await run(hub, operator, channel_id, "go")
    assert (task.end_reason, task.current_round, task.calls, task.accepted) == (
        "dormant",
        2,
        4,
        1,
    )


# -- C7 early end ---------------------------------------------------------------------------------
async def test_all_members_voting_in_one_round_ends_early(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    rt = await agents(
        make_agent,
        runtimes,
        alpha=[f"One queue is enough. {DONE_MARKER}"],
        beta=[f"Agreed.\n{DONE_MARKER}\n"],
    )
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=3)
    task = await run(hub, operator, channel_id, "settle it")
    assert (task.end_reason, task.current_round, task.calls) == ("unanimous", 1, 2)
    assert len(rt["alpha"].turns) == 1
    stored = await messages(hub, channel_id)
    assert [m.content for m in stored[1:]] == ["One queue is enough.", "Agreed."]
    assert DONE_MARKER not in "".join(m.content for m in stored)
    assert DONE_MARKER not in "".join(contents(rt["beta"].turns[0]))


async def test_votes_split_across_rounds_do_not_end_early(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await agents(
        make_agent,
        runtimes,
        alpha=[f"done {DONE_MARKER}", "more", "still more"],
        beta=["wait", f"now done {DONE_MARKER}", "again"],
    )
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=3)
    task = await run(hub, operator, channel_id, "go")
    assert (task.end_reason, task.current_round, task.calls) == ("max_rounds", 3, 6)
    stored = await messages(hub, channel_id)
    assert DONE_MARKER not in "".join(m.content for m in stored)
    assert [m.content for m in stored[1:3]] == ["done", "wait"]


async def test_a_member_listed_twice_speaks_and_votes_once(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    rt = await agents(
        make_agent, runtimes, alpha=[f"yes {DONE_MARKER}"], beta=[f"yes {DONE_MARKER}"]
    )
    channel_id = await group(hub, operator, ["alpha", "beta", "alpha", "beta"], rounds=3)
    task = await run(hub, operator, channel_id, "go")
    assert task.members == ["alpha", "beta"]
    assert (task.end_reason, task.calls) == ("unanimous", 2)
    assert len(rt["alpha"].turns) == len(rt["beta"].turns) == 1


async def test_a_marker_in_the_middle_is_removed_and_is_no_vote(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await agents(
        make_agent,
        runtimes,
        alpha=[f"I would write {DONE_MARKER} but not yet."],
        beta=[f"ok {DONE_MARKER}"],
    )
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=1)
    task = await run(hub, operator, channel_id, "go")
    assert task.end_reason == "max_rounds"
    stored = await messages(hub, channel_id)
    assert DONE_MARKER not in "".join(m.content for m in stored)


# -- C11 failure ----------------------------------------------------------------------------------
async def test_a_failing_member_fails_the_task_and_keeps_what_was_said(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    rt = await agents(make_agent, runtimes, alpha=["A1", "A2"], gamma=["G1", "G2"])
    # beta's script comes from its stored config, as for an agent created over REST.
    failing = {"fail": "error", "message": "provider said 500"}
    await make_agent("beta", runtime={"kind": "scripted", "replies": ["B1", failing]})
    channel_id = await group(hub, operator, ["alpha", "beta", "gamma"], rounds=2)
    task = await run(hub, operator, channel_id, "go")
    assert (task.status, task.end_reason, task.failed_member) == ("finished", "failed", "beta")
    assert task.error is not None and "provider said 500" in task.error
    assert (task.current_round, task.calls, task.accepted) == (2, 5, 4)
    assert len(rt["gamma"].turns) == 1  # nobody speaks after the failure
    stored = await messages(hub, channel_id)
    assert [m.content for m in stored[1:]] == ["A1", "B1", "G1", "A2"]
    trace = await invocations(hub, task.id)
    assert [(i.agent_id, i.outcome, i.reason, i.model_route) for i in trace][-1] == (
        "beta",
        "failed",
        "runtime_error",
        "scripted",
    )


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (RuntimeFailure("took too long", reason="timeout"), "runtime_timeout"),
        ("   ", "runtime_empty"),
    ],
)
async def test_timeouts_and_empty_replies_are_failures_not_silence(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    reply: Any,
    code: str,
) -> None:
    def beta(turn: Turn) -> str:
        if isinstance(reply, Exception):
            raise reply
        return str(reply)

    await agents(make_agent, runtimes, alpha=["A1"], beta=beta)
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=1)
    task = await run(hub, operator, channel_id, "go")
    assert (task.end_reason, task.failed_member, task.accepted) == ("failed", "beta", 1)
    assert task.error is not None and task.error.startswith(code)
    assert [m.content for m in await messages(hub, channel_id)][1:] == ["A1"]


# -- C12 snapshot ---------------------------------------------------------------------------------
async def test_edits_during_a_task_apply_to_the_next_task(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    gate = Gate()
    calls: list[tuple[str, int | None]] = []

    async def reply(turn: Turn) -> str:
        calls.append((turn.agent.id, turn.round))
        if gate.calls == 0:
            await gate.wait()
        return f"{turn.agent.id} r{turn.round}"

    await agents(make_agent, runtimes, alpha=reply, beta=reply, gamma=reply)
    channel_id = await group(hub, operator, ["alpha", "beta", "gamma"], rounds=2)
    posted = await hub.channels.post(operator, channel_id, "first")
    await within(gate.entered.wait(), "the first call")
    await hub.channels.update(
        operator, channel_id, ChannelPatch(members=["gamma"], discussion_rounds=1)
    )
    running = await hub.tasks.get(operator, posted.task_id or "")
    assert (running.status, running.members, running.rounds) == (
        "running",
        ["alpha", "beta", "gamma"],
        2,
    )
    gate.release.set()
    await hub.tasks.wait_idle()
    first = await hub.tasks.get(operator, posted.task_id or "")
    assert (first.end_reason, first.calls, first.members, first.rounds) == (
        "max_rounds",
        6,
        ["alpha", "beta", "gamma"],
        2,
    )
    calls.clear()
    second = await run(hub, operator, channel_id, "second")
    assert (second.members, second.rounds, second.calls) == (["gamma"], 1, 1)
    assert calls == [("gamma", 1)]


# -- C13 trace ------------------------------------------------------------------------------------
async def test_every_call_leaves_an_invocation_record(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
) -> None:
    def alpha(turn: Turn) -> str:
        clock.advance(2.5)  # the provider takes 2.5 s
        return "alpha says"

    await agents(make_agent, runtimes, alpha=alpha, beta=[NO_REPLY])
    channel_id = await group(hub, operator, ["alpha", "beta"], rounds=1)
    task = await run(hub, operator, channel_id, "trace me")
    stored = await messages(hub, channel_id)
    trigger, reply = stored
    first, second = await invocations(hub, task.id)
    for inv in (first, second):
        assert (inv.task_id, inv.channel_id, inv.trigger_id, inv.round) == (
            task.id,
            channel_id,
            trigger.id,
            1,
        )
        assert inv.model_route == "scripted"
        assert inv.prompt_chars > 0
        assert {"queue_ms", "prompt_build_ms", "provider_wait_ms", "persist_ms"} <= set(inv.timings)
    assert (first.agent_id, first.outcome, first.reason, first.message_id) == (
        "alpha",
        "accepted",
        None,
        reply.id,
    )
    assert reply.metadata["invocation_id"] == first.id
    assert reply.metadata["model_route"] == "scripted"
    assert (first.prompt_first_id, first.prompt_last_id) == (trigger.id, trigger.id)
    assert first.timings["provider_wait_ms"] == pytest.approx(2500)
    assert (second.agent_id, second.outcome, second.message_id) == ("beta", "silent", None)
    assert (second.prompt_first_id, second.prompt_last_id) == (trigger.id, reply.id)
    assert second.timings["provider_wait_ms"] == 0
    r = await hub.tasks.invocations(operator, task.id)
    assert [i.id for i in r] == [first.id, second.id]


# -- restart --------------------------------------------------------------------------------------
async def test_a_restart_interrupts_running_tasks_and_keeps_committed_messages(
    settings: Settings, clock: FakeClock
) -> None:
    gate = Gate()

    async def stuck(turn: Turn) -> str:
        await gate.wait()  # never released: the hub stops while this call waits
        return "never"

    first_runtimes = StaticRuntimes()
    first_runtimes.set("alpha", ScriptedRuntime(["A1"]))
    first_runtimes.set("beta", ScriptedRuntime(stuck))
    first = build_hub(settings, clock=clock, runtimes=first_runtimes)
    await first.start(background=False)
    token = first.operator_token
    operator = await first.identity.authenticate(token)
    for name in ("alpha", "beta"):
        await first.identity.create_agent(
            operator, AgentSpec(id=name, runtime={"kind": "scripted"})
        )
    channel_id = await group(first, operator, ["alpha", "beta"], rounds=2)
    posted = await first.channels.post(operator, channel_id, "long job")
    await within(gate.entered.wait(), "beta's call")
    # A task a crashed hub left running in another channel (its process is gone).
    other_id = await group(first, operator, ["alpha"], rounds=1)
    orphan = Task(
        id=new_ulid(),
        channel_id=other_id,
        trigger_id=new_ulid(),
        mode="group",
        members=["alpha"],
        rounds=1,
        owner="a-dead-hub",
        created=clock.now(),
    )

    async def leave_orphan(tx: Tx) -> None:
        tx.insert("tasks", orphan)

    await first.store.write(leave_orphan)
    await first.stop()

    second = build_hub(settings, clock=clock, runtimes=StaticRuntimes())
    await second.start(background=False)
    try:
        operator = await second.identity.authenticate(token)
        task = await second.tasks.get(operator, posted.task_id or "")
        assert (task.status, task.end_reason) == ("finished", "interrupted")
        stored = await messages(second, channel_id)
        assert [(m.sender_id, m.content) for m in stored[:2]] == [
            ("operator", "long job"),
            ("alpha", "A1"),
        ]
        assert len(stored) == 3
        assert stored[2].sender_kind == "system"
        assert stored[2].content.startswith("[Discussion Interrupted]")
        left = await second.tasks.get(operator, orphan.id)
        assert (left.status, left.end_reason) == ("finished", "interrupted")
        notes = await messages(second, other_id)
        assert [(m.sender_kind, m.content.splitlines()[0]) for m in notes] == [
            ("system", "[Discussion Interrupted]")
        ]
        # Nothing more happens on a second start.
        assert await second.tasks.recover() == []
    finally:
        await second.stop()
