"""Meeting rooms end to end on the service layer (R1–R9, R11): membership refusals, a full
meeting of three members with their own models, late entry, restoration on dismissal, budgets,
human interjections, the emergency stop and recovery after a crash."""

from __future__ import annotations

import asyncio

import pytest

from parley.adapters.runtimes.scripted import ScriptedFailure, ScriptedRuntime
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import Conflict, PermissionDenied, StorageError
from parley.core.events import Event
from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.core.ports import Tx
from parley.core.rooms import Meeting
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import is_meeting, members, room_with
from tests.integration.test_metrics import samples


async def finished(hub: Hub, operator: Principal, meeting_id: str) -> Meeting:
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    return await hub.meetings.get(operator, meeting_id)


async def meeting_events(hub: Hub, meeting_id: str) -> list[Event]:
    async with hub.store.read() as tx:
        return await hub.ctx.events.query(tx, subject=f"meeting:{meeting_id}")


async def states(hub: Hub, operator: Principal, room_id: str) -> dict[str, str]:
    async with hub.store.read() as tx:
        rows = await hub.rooms.member_rows(tx, room_id)
    return {row.agent_id: row.state for row in rows}


# -- refusals ------------------------------------------------------------------------------------
async def test_a_non_member_can_neither_convene_nor_be_summoned(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await members(make_agent, runtimes, ["a", "b", "d"])
    room = await room_with(hub, operator, ["a", "b"])
    d = await hub.identity.require("d")
    with pytest.raises(PermissionDenied) as caught:
        await hub.meetings.convene(d, room.id, ConveneSpec(topic="t"))
    assert caught.value.code == "not_a_room_member"
    with pytest.raises(PermissionDenied) as caught:
        await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t", members=["a", "d"]))
    assert caught.value.code == "summon_non_member"
    assert await states(hub, operator, room.id) == {"a": "idle-waiting", "b": "idle-waiting"}
    with pytest.raises(PermissionDenied) as caught:
        await hub.rooms.get(d, room.id)
    assert caught.value.code == "not_a_room_member"


async def test_an_agent_belongs_to_one_room_and_sub_sessions_may_not_join(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await members(make_agent, runtimes, ["a", "b"])
    first = await room_with(hub, operator, ["a"])
    second = await hub.rooms.create(operator, RoomSpec(name="other"))
    with pytest.raises(Conflict) as caught:
        await hub.rooms.join(operator, second.id, "a")
    assert caught.value.code == "room_membership_exclusive"
    b = await hub.identity.require("b")
    channel = await hub.channels.create(
        operator,
        __import__("parley.service.conversations.channels", fromlist=["ChannelSpec"]).ChannelSpec(
            name="side"
        ),
    )

    async def side_session(tx: Tx) -> str:
        return (await hub.channels.session(tx, b, channel.id)).id

    child = await hub.store.write(side_session)
    with pytest.raises(PermissionDenied) as caught:
        await hub.rooms.join(b, second.id, "b", session_id=child)
    assert caught.value.code == "subagent_cannot_join"
    with pytest.raises(PermissionDenied) as caught:
        await hub.rooms.join(b, first.id, "a")
    assert caught.value.code == "room_join_forbidden"
    joined = await hub.rooms.join(b, second.id, "b")
    assert joined.session_id != child


async def test_join_or_leave_while_in_a_meeting_is_refused(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a"])
    team["a"].speech_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a"], max_rounds=1)
    other = await hub.rooms.create(operator, RoomSpec(name="other"))
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await team["a"].speech_started.wait()
    with pytest.raises(Conflict) as caught:
        await hub.rooms.join(operator, other.id, "a")
    assert caught.value.code == "member_in_meeting"
    with pytest.raises(Conflict) as caught:
        await hub.rooms.leave(operator, room.id, "a")
    assert caught.value.code == "member_in_meeting"
    with pytest.raises(Conflict) as caught:
        await hub.meetings.convene(operator, room.id, ConveneSpec(topic="again"))
    assert caught.value.code == "meeting_already_running"
    team["a"].speech_gate.set()
    assert (await finished(hub, operator, meeting.id)).end_reason == "round_cap"
    await hub.rooms.leave(operator, room.id, "a")
    await hub.rooms.join(operator, other.id, "a")


async def test_convening_when_nobody_can_enter_leaves_nobody_half_summoned(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a"])
    team["a"].work_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a"])
    a = await hub.identity.require("a")
    assert a.work_channel_id is not None
    await hub.channels.post(operator, a.work_channel_id, "work on it")
    await team["a"].work_started.wait()
    with pytest.raises(Conflict) as caught:
        await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    assert caught.value.code == "nobody_can_enter"
    assert await states(hub, operator, room.id) == {"a": "idle-waiting"}
    assert [v.state for v in await hub.rooms.members(operator, room.id)] == ["working"]
    assert await hub.meetings.of_room(operator, room.id) == []
    team["a"].work_gate.set()
    await hub.tasks.wait_idle()


# -- a full meeting ------------------------------------------------------------------------------
async def test_three_members_meet_with_their_own_models_and_get_their_own_minutes(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b", "c"])
    for name in team:
        agent = await hub.identity.require(name)
        assert agent.work_channel_id is not None
        await hub.channels.post(operator, agent.work_channel_id, f"MARK-{name} private note")
    await hub.tasks.wait_idle()
    team["a"].decisions = [
        {"action": "invite", "next": "b"},
        {"action": "invite", "next": "zed"},  # unknown: safe rotation, recorded
        {"action": "invite", "next": "c"},
        {"action": "adjourn"},
    ]
    for name, member in team.items():
        member.speeches = [f"{name} reports its state"]
        member.minutes = [f"{name}: what matters to {name}"]
    room = await room_with(hub, operator, ["a", "b", "c"])
    a = await hub.identity.require("a")
    meeting = await hub.meetings.convene(a, room.id, ConveneSpec(topic="align costs"))
    done = await finished(hub, operator, meeting.id)
    assert done.end_reason == "adjourned"

    speeches = await hub.meetings.speeches(operator, meeting.id)
    assert [(s.agent_id, s.outcome) for s in speeches] == [
        ("b", "accepted"),
        ("a", "accepted"),
        ("c", "accepted"),
    ]
    for s in speeches:
        assert s.runtime == "scripted"
        assert s.model_route == f"scripted:model-{s.agent_id}"
    minutes = await hub.meetings.minutes(operator, meeting.id)
    assert {m.agent_id: m.model_route for m in minutes} == {n: f"scripted:model-{n}" for n in "abc"}
    assert all(m.status == "delivered" for m in minutes)
    assert len({m.text for m in minutes}) == 3
    # An agent sees only its own minutes; each got them as mail and in its work channel.
    assert [m.agent_id for m in await hub.meetings.minutes(a, meeting.id)] == ["a"]
    for name in team:
        inbox = await hub.mail.inbox(operator, name, InboxFilter(kind="minutes"))
        assert [m.body for m in inbox] == [f"{name}: what matters to {name}"]
        agent = await hub.identity.require(name)
        assert agent.work_channel_id is not None
        work = await hub.channels.messages(operator, agent.work_channel_id)
        assert any("what matters to" in m.content for m in work if m.sender_kind == "moderator")

    # Each entrant saw its own private context and nobody else's.
    for name, member in team.items():
        prompt = member.speech_turns()[0].prompt.render()
        assert f"MARK-{name}" in prompt
        for other in team:
            if other != name:
                assert f"MARK-{other}" not in prompt
    # The moderator saw no private context, and its fallback was recorded.
    moderator_turns = [t for t in team["a"].turns if t.agent.id == "moderator"]
    assert moderator_turns and all("MARK-" not in t.prompt.render() for t in moderator_turns)
    events = await meeting_events(hub, meeting.id)
    fallbacks = [e for e in events if e.type == "meeting.moderator_fallback"]
    assert [e.payload["fallback"] for e in fallbacks] == ["absent_speaker"]
    assert all(e.payload["scripted"] for e in events if e.type.startswith("meeting.moderator"))
    assert await states(hub, operator, room.id) == {n: "idle-waiting" for n in "abc"}


async def test_dismissal_restores_each_state_and_the_room_meets_again(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    """Source 002 §5.12: not "everyone back to working"; a done member is done again, an idle
    one idle, and the room can be convened again at once."""
    await members(make_agent, runtimes, ["a", "b"])
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1)
    await hub.rooms.mark_done(await hub.identity.require("a"))
    for _ in range(2):
        meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
        done = await finished(hub, operator, meeting.id)
        assert done.end_reason == "round_cap"
        assert await states(hub, operator, room.id) == {"a": "done", "b": "idle-waiting"}
    # No moderator model: rotation moderates, named as such, and nothing is recorded as failing.
    assert done.moderator_route == "rotation"
    events = await meeting_events(hub, meeting.id)
    assert not [e for e in events if e.type == "meeting.moderator_fallback"]
    decisions = [e.payload for e in events if e.type == "meeting.moderator"]
    assert [(d["moderator"], d["next"], d["fallback"]) for d in decisions] == [
        ("rotation", "a", None),
        ("rotation", "b", None),
    ]
    async with hub.store.read() as tx:
        i = tx.table("invocations").c
        assert await tx.select("invocations", i.task_id == meeting.id) == []


async def test_a_working_member_enters_at_its_turn_end_and_goes_back_to_working(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["b"].work_gate = asyncio.Event()
    team["a"].speech_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1)
    b = await hub.identity.require("b")
    assert b.work_channel_id is not None
    await hub.channels.post(operator, b.work_channel_id, "long job")
    await team["b"].work_started.wait()
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    assert [(x.agent_id, x.attendance) for x in meeting.attendees] == [
        ("a", "present"),
        ("b", "awaiting"),
    ]
    assert await states(hub, operator, room.id) == {"a": "in-meeting", "b": "awaiting-entry"}
    await team["a"].speech_started.wait()
    team["b"].work_gate.set()
    await hub.tasks.wait_idle()
    assert await states(hub, operator, room.id) == {"a": "in-meeting", "b": "in-meeting"}
    team["a"].speech_gate.set()
    done = await finished(hub, operator, meeting.id)
    assert done.end_reason == "round_cap"
    assert [(x.agent_id, x.attendance) for x in done.attendees] == [
        ("a", "present"),
        ("b", "present"),
    ]
    spoke = [s.agent_id for s in await hub.meetings.speeches(operator, meeting.id)]
    assert spoke == ["a", "b"]
    # b was working when summoned: that is the state it goes back to.
    assert (await states(hub, operator, room.id))["b"] == "working"


# -- budgets, humans, stop, recovery ---------------------------------------------------------------
async def test_an_over_limit_speech_is_rejected_retried_once_then_failed(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].speeches = ["x" * 150, "short enough"]
    team["b"].speeches = ["y" * 150, "z" * 150]
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1, speech_limit=100)
    meeting = await hub.meetings.convene(
        operator, room.id, ConveneSpec(topic="t", members=["a", "b"])
    )
    await finished(hub, operator, meeting.id)
    got = [
        (s.agent_id, s.attempt, s.outcome, s.chars)
        for s in await hub.meetings.speeches(operator, meeting.id)
    ]
    assert got[:4] == [
        ("a", 1, "over_limit", 150),
        ("a", 2, "accepted", 12),
        ("b", 1, "over_limit", 150),
        ("b", 2, "failed", 150),
    ]
    retry = team["a"].speech_turns()[1].prompt.instructions
    assert "100" in retry and "150" in retry
    transcript = (await hub.meetings.transcript(operator, meeting.id)).rows
    assert not any(m.content.startswith(("x" * 101, "y" * 101)) for m in transcript)


async def test_a_human_speaks_without_a_turn_and_the_next_speaker_sees_it(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].speech_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await team["a"].speech_started.wait()
    await hub.meetings.post(operator, meeting.id, "HUMAN-NOTE: check the budget")
    team["a"].speech_gate.set()
    await finished(hub, operator, meeting.id)
    assert "HUMAN-NOTE" in team["b"].speech_turns()[0].prompt.render()
    a = await hub.identity.require("a")
    with pytest.raises(PermissionDenied) as caught:
        await hub.meetings.post(a, meeting.id, "me too")
    assert caught.value.code == "meeting_post_humans_only"


async def test_the_emergency_stop_needs_no_room_and_actually_ends_the_meeting(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].speech_gate = asyncio.Event()  # never set: only the stop ends this speech
    room = await room_with(hub, operator, ["a", "b"])
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await team["a"].speech_started.wait()
    stopped = await hub.meetings.stop(operator)
    assert [m.id for m in stopped] == [meeting.id]
    assert stopped[0].status == "ended" and stopped[0].end_reason == "stopped"
    again = await hub.meetings.get(operator, meeting.id)
    assert again.end_reason == "stopped"
    assert await states(hub, operator, room.id) == {"a": "idle-waiting", "b": "idle-waiting"}
    assert not any(t for t in team["b"].turns if is_meeting(t))


async def test_a_meeting_left_running_by_a_dead_hub_is_interrupted_on_start(
    settings: Settings, clock: FakeClock
) -> None:
    """R7: a hub that died mid-meeting left it running; the next hub closes it as interrupted,
    keeps its transcript and restores its members (here: one idle, one done)."""
    first = build_hub(settings, clock=clock, runtimes=StaticRuntimes())
    await first.start(background=False)
    token = first.operator_token
    operator = await first.identity.authenticate(token)
    for name in ("a", "b"):
        await first.identity.create_agent(operator, AgentSpec(id=name, runtime={"kind": "none"}))
    room = await room_with(first, operator, ["a", "b"])
    await first.rooms.mark_done(await first.identity.require("b"))
    # No driver: the meeting stays as a crash leaves it, owned by a hub that is gone.
    first.meetings.launch = lambda meeting: None  # type: ignore[method-assign]
    meeting = await first.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await first.meetings.post(operator, meeting.id, "said before the crash")

    async def orphan(tx: Tx) -> None:
        await tx.update("meetings", meeting.id, owner="a-dead-hub")

    await first.store.write(orphan)
    await first.stop()

    second = build_hub(settings, clock=clock, runtimes=StaticRuntimes())
    await second.start(background=False)
    try:
        operator = await second.identity.authenticate(token)
        done = await second.meetings.get(operator, meeting.id)
        assert (done.status, done.end_reason) == ("ended", "interrupted")
        transcript = [
            m.content for m in (await second.meetings.transcript(operator, meeting.id)).rows
        ]
        assert "said before the crash" in transcript
        assert transcript[-1].startswith("[Meeting interrupted]")
        assert await states(second, operator, room.id) == {"a": "idle-waiting", "b": "done"}
        assert await second.meetings.recover() == []
    finally:
        await second.stop()


async def test_refused_minutes_are_retried_once_then_recorded_as_failed(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b", "c"])
    team["a"].minutes = ["the same minutes"]
    team["b"].minutes = ["the same minutes", "b: what b must do"]
    team["c"].minutes = ["x" * 5000, "y" * 5000]
    room = await room_with(hub, operator, ["a", "b", "c"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await finished(hub, operator, meeting.id)
    got = {
        m.agent_id: (m.status, m.attempts, m.reason, m.text)
        for m in await hub.meetings.minutes(operator, meeting.id)
    }
    assert got == {
        "a": ("delivered", 1, None, "the same minutes"),
        "b": ("delivered", 2, None, "b: what b must do"),
        "c": ("failed", 2, "over_limit", ""),
    }
    assert await hub.mail.inbox(operator, "c", InboxFilter(kind="minutes")) == []


async def test_a_remote_member_takes_its_meeting_turns_through_wait_for_turn_and_speak(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await make_agent("r", runtime={"kind": "remote"})
    room = await room_with(hub, operator, ["r"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="remote costs"))
    r = await hub.identity.require("r")
    turn = await hub.turns.next(r, timeout_s=30)
    assert turn is not None and turn.channel_id == meeting.channel_id
    assert "[Meeting]" in turn.prompt["system"] and "remote costs" in turn.prompt["text"]
    await hub.turns.speak(r, turn.id, "r speaks from afar")
    minutes_turn = await hub.turns.next(r, timeout_s=30)
    assert minutes_turn is not None and "Write YOUR minutes" in minutes_turn.prompt["text"]
    await hub.turns.speak(r, minutes_turn.id, "r: my part")
    await hub.meetings.wait_idle()
    # The minutes in its work channel wake it (C2): its next turn is there.
    wake = await hub.turns.next(r, timeout_s=30)
    assert wake is not None and "r: my part" in wake.prompt["text"]
    await hub.turns.no_reply(r, wake.id)
    done = await finished(hub, operator, meeting.id)
    assert done.end_reason == "round_cap"
    [speech] = await hub.meetings.speeches(operator, meeting.id)
    assert (speech.agent_id, speech.outcome, speech.runtime) == ("r", "accepted", "remote")
    assert speech.model_route == "remote:r"
    [mine] = await hub.meetings.minutes(r, meeting.id)
    assert (mine.status, mine.text) == ("delivered", "r: my part")


async def test_a_meeting_whose_every_speech_fails_still_ends_at_its_round_cap(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    failing = ScriptedRuntime([ScriptedFailure(fail="error")], cycle=True)
    for name in ("a", "b"):
        await make_agent(name, runtime={"kind": "scripted"})
        runtimes.set(name, failing)
    room = await room_with(hub, operator, ["a", "b"], max_rounds=2)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    ended = await finished(hub, operator, meeting.id)
    assert (ended.status, ended.end_reason, ended.speeches) == ("ended", "round_cap", 0)
    failed = [e for e in await meeting_events(hub, meeting.id) if e.type == "meeting.speech_failed"]
    # Two rounds of two members, each turn failed once: the cap counts turns, not speeches.
    assert len(failed) == 4
    # The rounds count the same turns: the second pair of failures is round 2, as the cap knows.
    assert ended.turns == 4
    assert [s.round for s in await hub.meetings.speeches(operator, meeting.id)] == [1, 1, 2, 2]
    assert await states(hub, operator, room.id) == {"a": "idle-waiting", "b": "idle-waiting"}


async def test_text_the_store_cannot_hold_fails_a_speech_or_minutes_not_the_meeting(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    """A NUL in a speech or in minutes is refused like any bad draft: on PostgreSQL it would
    otherwise end the meeting as failed, or leave it running with its members held in it."""
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].speeches = ["a says \x00 something"]
    team["b"].minutes = ["b: minutes \x00", "b: clean minutes"]
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    done = await finished(hub, operator, meeting.id)
    assert (done.status, done.end_reason, done.speeches) == ("ended", "round_cap", 1)
    got = [
        (s.agent_id, s.outcome, s.reason) for s in await hub.meetings.speeches(operator, meeting.id)
    ]
    assert got == [("a", "failed", "invalid_text"), ("b", "accepted", None)]
    minutes = {
        m.agent_id: (m.status, m.attempts) for m in await hub.meetings.minutes(operator, meeting.id)
    }
    assert minutes == {"a": ("delivered", 1), "b": ("delivered", 2)}
    assert await states(hub, operator, room.id) == {"a": "idle-waiting", "b": "idle-waiting"}


async def test_a_meeting_whose_minutes_cannot_be_delivered_still_ends(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await members(make_agent, runtimes, ["a"])
    room = await room_with(hub, operator, ["a"], max_rounds=1)

    async def broken(*args: object) -> None:
        raise StorageError("the inbox is gone")

    monkeypatch.setattr(hub.meetings.voices, "deliver_minutes", broken)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    done = await finished(hub, operator, meeting.id)
    assert (done.status, done.end_reason) == ("ended", "failed")
    assert done.error is not None and "the inbox is gone" in done.error
    assert await states(hub, operator, room.id) == {"a": "idle-waiting"}


async def test_meeting_calls_are_counted_in_the_turn_metrics(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["b"].speeches = ["y" * 150, "b, shorter"]
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1, speech_limit=100)
    a = await hub.identity.require("a")
    meeting = await hub.meetings.convene(a, room.id, ConveneSpec(topic="t"))
    await finished(hub, operator, meeting.id)

    seen = samples(hub.ctx.metrics.exposition().decode())

    # Two moderator decisions by a's model, two accepted speeches, and the wake turn the
    # minutes start in each member's work channel; b's first speech, over the limit, rejected.
    assert seen[("parley_turns_total", (("outcome", "accepted"), ("runtime", "scripted")))] == 6
    assert seen[("parley_turns_total", (("outcome", "rejected"), ("runtime", "scripted")))] == 1
    over = ("parley_turn_failures_total", (("reason", "over_limit"), ("runtime", "scripted")))
    assert seen[over] == 1


async def test_the_status_of_a_room_shows_its_running_meeting_else_its_latest(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    room = await room_with(hub, operator, ["a", "b"], min_meeting_interval_s=0)
    a = await hub.identity.require("a")
    empty = await hub.meetings.status(a, room_id=room.id, meeting_id=None, recent=5)
    assert (empty.meeting, empty.recent) == (None, [])
    assert [m.agent_id for m in empty.members] == ["a", "b"]
    first = await hub.meetings.convene(a, room.id, ConveneSpec(topic="first"))
    await finished(hub, operator, first.id)
    latest = await hub.meetings.status(a, room_id=room.id, meeting_id=None, recent=1)
    assert latest.meeting is not None and latest.meeting.id == first.id
    [note] = latest.recent
    assert note.content.startswith("[Meeting adjourned]")
    team["a"].speech_gate = asyncio.Event()
    second = await hub.meetings.convene(a, room.id, ConveneSpec(topic="second"))
    await team["a"].speech_started.wait()
    running = await hub.meetings.status(a, room_id=room.id, meeting_id=None, recent=0)
    assert running.meeting is not None and running.meeting.id == second.id
    assert running.recent == []
    named = await hub.meetings.status(operator, room_id=None, meeting_id=first.id, recent=0)
    assert (named.room_id, named.meeting) == (room.id, await hub.meetings.get(operator, first.id))
    team["a"].speech_gate.set()
    await finished(hub, operator, second.id)


async def test_two_hubs_convening_one_room_at_once_start_one_meeting(
    settings: Settings, clock: FakeClock, backend: str
) -> None:
    """Hubs sharing a store convene one at a time per room: the second finds the first's
    meeting running, whichever wins (one SQLite file has one hub: it convenes twice)."""
    hubs = [build_hub(settings, clock=clock, runtimes=StaticRuntimes())]
    if backend == "postgres":
        hubs.append(build_hub(settings, clock=clock, runtimes=StaticRuntimes()))
    for hub in hubs:
        await hub.start(background=False)
        hub.meetings.launch = lambda meeting: None  # type: ignore[method-assign]
    try:
        operator = await hubs[0].identity.authenticate(hubs[0].operator_token)
        await hubs[0].identity.create_agent(operator, AgentSpec(id="a", runtime={"kind": "none"}))
        room = await room_with(hubs[0], operator, ["a"])
        results = await asyncio.gather(
            *(
                hubs[i % len(hubs)].meetings.convene(operator, room.id, ConveneSpec(topic="t"))
                for i in (0, 1)
            ),
            return_exceptions=True,
        )
        convened = [r for r in results if isinstance(r, Meeting)]
        refused = [r for r in results if isinstance(r, Conflict)]
        assert len(convened) == 1, results
        assert [r.code for r in refused] == ["meeting_already_running"]
        assert [m.id for m in await hubs[-1].meetings.of_room(operator, room.id)] == [
            convened[0].id
        ]
    finally:
        for hub in hubs:
            await hub.stop()
