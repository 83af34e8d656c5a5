"""What a meeting tells its members is true and their own: every committed post reaches the next
speaker, the roll shows who is really there, the hub's notices take no context budget, working
means a turn of one's own, every summoned member hears the outcome, accepted minutes survive a
crash, a stopped turn is refused as cancelled, one meeting stops alone, one round everywhere,
and a worker's prompt names the channel it is in."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest

from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import Conflict
from parley.core.identity import Principal
from parley.core.mail import InboxFilter, SendRequest
from parley.core.meetings import roll_call
from parley.core.ports import Tx
from parley.core.rooms import Meeting
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.meetings.meetings import ConveneSpec
from parley.service.workers.records import StartSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import eventually, within
from tests.integration.meeting_support import (
    LabelledRuntime,
    Member,
    is_minutes,
    is_moderator,
    members,
    room_with,
)
from tests.integration.test_meeting_rooms import finished, states
from tests.integration.test_workers import scripted


async def over(hub: Hub, operator: Principal, meeting_id: str) -> Meeting:
    return await within(finished(hub, operator, meeting_id), "the meeting's end")


def line(prompt: str, start: str) -> str:
    """The line of a prompt that starts with ``start``."""
    return next(x for x in prompt.splitlines() if x.startswith(start))


def rewire(
    runtimes: StaticRuntimes, member: Member, reply: Callable[[Turn], Awaitable[str]]
) -> None:
    """Answer the member's turns with ``reply`` from now on (its runtime is built anew)."""
    member.reply = reply  # type: ignore[method-assign]
    runtimes.set(member.name, LabelledRuntime(member))


class GatedModerator:
    """Holds the convener's ``at``-th moderator decision until ``release`` is set."""

    def __init__(self, runtimes: StaticRuntimes, member: Member, at: int = 1) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.inner = member.reply
        self.at = at
        self.asked = 0
        rewire(runtimes, member, self.reply)

    async def reply(self, turn: Turn) -> str:
        if is_moderator(turn):
            self.asked += 1
        if is_moderator(turn) and self.asked == self.at:
            self.started.set()
            await self.release.wait()
        return await self.inner(turn)


# -- 1: every committed post is in the next prompt ------------------------------------------------
async def test_a_human_post_landing_while_the_moderator_decides_reaches_the_next_speaker(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].decisions = [{"action": "invite", "next": "b"}, {"action": "adjourn"}]
    gate = GatedModerator(runtimes, team["a"])
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1)
    a = await hub.identity.require("a")
    meeting = await hub.meetings.convene(a, room.id, ConveneSpec(topic="t"))
    await within(gate.started.wait(), "gate.started")
    await hub.meetings.post(operator, meeting.id, "HUMAN-WHILE-DECIDING: mind the freeze")
    gate.release.set()
    await over(hub, operator, meeting.id)
    [first] = team["b"].speech_turns()
    assert "HUMAN-WHILE-DECIDING" in first.prompt.render()


# -- 2: present, awaiting and absent as they are ------------------------------------------------
async def test_the_roll_in_prompts_shows_awaiting_members_apart_from_those_present(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b", "w"])
    team["w"].work_gate = asyncio.Event()
    team["a"].decisions = [{"action": "invite", "next": "a"}, {"action": "invite", "next": "b"}]
    room = await room_with(hub, operator, ["a", "b", "w"], max_rounds=1)
    w = await hub.identity.require("w")
    assert w.work_channel_id is not None
    await hub.channels.post(operator, w.work_channel_id, "long job")
    await within(team["w"].work_started.wait(), "team[w].work_started")
    a = await hub.identity.require("a")
    meeting = await hub.meetings.convene(a, room.id, ConveneSpec(topic="t"))
    await within(hub.meetings.wait_idle(), "meetings idle")
    prompt = team["a"].speech_turns()[0].prompt.system
    assert line(prompt, "Present:") == "Present: a, b"
    assert line(prompt, "Awaiting entry").endswith(": w")
    moderator = next(t for t in team["a"].turns if is_moderator(t)).prompt.system
    assert line(moderator, "Present:") == "Present: a, b"
    assert line(moderator, "Awaiting entry").endswith(": w")
    team["w"].work_gate.set()
    await over(hub, operator, meeting.id)


async def test_a_human_convener_is_present_and_an_unsummoned_agent_convener_is_not(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1, min_meeting_interval_s=0)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t", members=["b"]))
    await over(hub, operator, meeting.id)
    assert line(team["b"].speech_turns()[0].prompt.system, "Present:") == "Present: b, operator"
    a = await hub.identity.require("a")
    again = await hub.meetings.convene(a, room.id, ConveneSpec(topic="u", members=["b"]))
    await over(hub, operator, again.id)
    assert line(team["b"].speech_turns()[1].prompt.system, "Present:") == "Present: b"


# -- 3: the hub's notices never take a member's context budget ---------------------------------
async def test_turn_notices_do_not_push_a_members_private_mail_out_of_its_prompt(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    await hub.mail.send(
        operator, SendRequest(to="a", kind="task", subject="PRIVATE-MAIL", body="budget is 3k")
    )

    async def notices(tx: Tx) -> None:
        for i in range(40):
            await hub.mail.deliver_system(
                tx, "a", "notice", f"Your turn in channel c{i} (round 1)", "x" * 200
            )

    await hub.store.write(notices)
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1, projection_chars=600)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await over(hub, operator, meeting.id)
    prompt = team["a"].speech_turns()[0].prompt.system
    assert "PRIVATE-MAIL" in prompt
    assert "Your turn in channel" not in prompt


async def test_earlier_minutes_in_the_work_channel_do_not_push_a_members_work_out(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    a = await hub.identity.require("a")
    assert a.work_channel_id is not None
    await hub.channels.post(operator, a.work_channel_id, "REAL-WORK: the parser is half done")
    await within(hub.tasks.wait_idle(), "tasks idle")
    team["a"].speeches = ["a" * 1000]
    team["b"].speeches = ["b" * 1000]
    team["a"].minutes = ["EARLIER-MINUTES " + "m" * 900]
    room = await room_with(
        hub, operator, ["a", "b"], max_rounds=1, projection_chars=600, min_meeting_interval_s=0
    )
    first = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="one"))
    await over(hub, operator, first.id)
    await within(hub.tasks.wait_idle(), "tasks idle")
    work = await hub.channels.messages(operator, a.work_channel_id)
    assert any("EARLIER-MINUTES" in m.content for m in work)
    second = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="two"))
    await over(hub, operator, second.id)
    prompt = team["a"].speech_turns()[-1].prompt.system
    assert "REAL-WORK" in prompt
    assert "EARLIER-MINUTES" not in prompt and "[Meeting minutes" not in prompt


# -- 4: working is a turn of this member in flight -----------------------------------------------
async def test_a_member_whose_turn_in_a_group_is_over_is_not_working(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["b"].work_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a"], max_rounds=1)
    group = await hub.channels.create(
        operator, ChannelSpec(name="g", members=["a", "b"], discussion_rounds=1)
    )
    await hub.channels.post(operator, group.id, "both of you, look at this")
    # a spoke first; b's turn holds the task running.
    await within(team["b"].work_started.wait(), "team[b].work_started")
    assert [v.state for v in await hub.rooms.members(operator, room.id)] == ["idle-waiting"]
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    assert [(x.agent_id, x.attendance) for x in meeting.attendees] == [("a", "present")]
    team["b"].work_gate.set()
    await over(hub, operator, meeting.id)


# -- 5: an absentee hears the outcome ------------------------------------------------------------
async def test_a_summoned_member_that_never_enters_gets_an_outcome_notice_as_its_minutes(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "w"])
    team["w"].work_gate = asyncio.Event()
    team["a"].speeches = ["w must rebase the parser branch by Friday"]
    room = await room_with(hub, operator, ["a", "w"], max_rounds=1)
    w = await hub.identity.require("w")
    assert w.work_channel_id is not None
    await hub.channels.post(operator, w.work_channel_id, "long job")
    await within(team["w"].work_started.wait(), "team[w].work_started")
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="parser"))
    await within(hub.meetings.wait_idle(), "meetings idle")
    minutes = {m.agent_id: m for m in await hub.meetings.minutes(operator, meeting.id)}
    notice = minutes["w"]
    assert (notice.status, notice.reason, notice.runtime) == (
        "delivered",
        "written_for_absentee",
        "hub",
    )
    assert notice.text.startswith("[Outcome notice written for an absentee]")
    assert "round_cap" in notice.text and "rebase the parser branch" in notice.text
    assert len(notice.text) <= room.config.minutes_limit
    [mail] = await hub.mail.inbox(operator, "w", InboxFilter(kind="minutes"))
    assert mail.body == notice.text and notice.mail_id == mail.id
    # Its turn at work was not superseded by the notice: it is still running.
    assert hub.tasks.in_flight("w")
    team["w"].work_gate.set()
    await within(hub.tasks.wait_idle(), "tasks idle")
    assert (await states(hub, operator, room.id))["w"] == "working"
    work = await hub.channels.messages(operator, w.work_channel_id)
    assert any("Outcome notice" in m.content for m in work)


async def test_an_absentees_notice_counts_speeches_as_the_meeting_does_and_posts_apart(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "w"])
    team["w"].work_gate = asyncio.Event()
    team["a"].speech_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a", "w"], max_rounds=1)
    w = await hub.identity.require("w")
    assert w.work_channel_id is not None
    await hub.channels.post(operator, w.work_channel_id, "long job")
    await within(team["w"].work_started.wait(), "team[w].work_started")
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="parser"))
    await within(team["a"].speech_started.wait(), "team[a].speech_started")
    await hub.meetings.post(operator, meeting.id, "the freeze is on Thursday")
    team["a"].speech_gate.set()
    await within(hub.meetings.wait_idle(), "meetings idle")
    done = await hub.meetings.get(operator, meeting.id)
    assert done.speeches == 1
    minutes = {m.agent_id: m for m in await hub.meetings.minutes(operator, meeting.id)}
    head = minutes["w"].text.splitlines()[0]
    assert head.endswith("after 1 speech by a, with 1 post by operator.")
    assert "the freeze is on Thursday" in minutes["w"].text
    team["w"].work_gate.set()
    await within(hub.tasks.wait_idle(), "tasks idle")


# -- 6: accepted minutes survive a crash ---------------------------------------------------------
async def test_minutes_accepted_before_a_crash_are_delivered_and_the_rest_marked_missing(
    settings: Settings, clock: FakeClock
) -> None:
    runtimes = StaticRuntimes()
    first = build_hub(settings, clock=clock, runtimes=runtimes)
    await first.start(background=False)
    token = first.operator_token
    operator = await first.identity.authenticate(token)
    team: dict[str, Member] = {}
    for name in ("a", "b"):
        await first.identity.create_agent(
            operator, AgentSpec(id=name, runtime={"kind": "scripted"})
        )
        team[name] = Member(name, model=f"model-{name}")
        runtimes.set(name, LabelledRuntime(team[name]))
    b_minutes_asked = asyncio.Event()
    never = asyncio.Event()
    inner = team["b"].reply

    async def b_reply(turn: Turn) -> str:
        if turn.prompt.task.startswith("The meeting on"):
            b_minutes_asked.set()
            await never.wait()  # the hub dies while b writes its minutes
        return await inner(turn)

    rewire(runtimes, team["b"], b_reply)
    room = await room_with(first, operator, ["a", "b"], max_rounds=1)
    meeting = await first.meetings.convene(operator, room.id, ConveneSpec(topic="t"))

    async def a_stored() -> bool:
        # Every member is asked at once: b being asked does not mean a's minutes are stored.
        return bool(await first.meetings.minutes(operator, meeting.id))

    async def orphan(tx: Tx) -> None:
        await tx.update("meetings", meeting.id, owner="a-dead-hub")

    try:
        await within(b_minutes_asked.wait(), "b_minutes_asked")
        await eventually(a_stored, "a's minutes stored")
        stored = await first.meetings.minutes(operator, meeting.id)
        assert [(m.agent_id, m.status) for m in stored] == [("a", "accepted")]
        await first.store.write(orphan)
    except BaseException:
        # A broken rule fails the test: b's held turn is let go so the hub can stop.
        never.set()
        await first.stop()
        raise
    # The hub "dies": its driver is left hanging, closing nothing.
    runner = first.meetings.live[meeting.id].runner
    first.meetings.live.clear()
    await first.stop()

    second = build_hub(settings, clock=clock, runtimes=StaticRuntimes())
    await second.start(background=False)
    try:
        operator = await second.identity.authenticate(token)
        done = await second.meetings.get(operator, meeting.id)
        assert (done.status, done.end_reason) == ("ended", "round_cap")
        got = {m.agent_id: m for m in await second.meetings.minutes(operator, meeting.id)}
        assert got["a"].status == "delivered" and got["a"].text == "a: my minutes"
        assert got["b"].status == "failed" and "missing" in (got["b"].reason or "")
        [mail] = await second.mail.inbox(operator, "a", InboxFilter(kind="minutes"))
        assert mail.body == "a: my minutes"
        assert await states(second, operator, room.id) == {
            "a": "idle-waiting",
            "b": "idle-waiting",
        }
    finally:
        await second.stop()
        assert runner is not None
        runner.cancel()
        with contextlib.suppress(BaseException):
            await runner


async def test_every_member_is_asked_for_its_minutes_at_once(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    """A member slow to write its minutes holds up nobody else's: a's minutes come back only
    once b has been asked for its own."""
    team = await members(make_agent, runtimes, ["a", "b"])
    b_asked = asyncio.Event()
    a_inner, b_inner = team["a"].reply, team["b"].reply

    async def a_reply(turn: Turn) -> str:
        if is_minutes(turn):
            await b_asked.wait()
        return await a_inner(turn)

    async def b_reply(turn: Turn) -> str:
        if is_minutes(turn):
            b_asked.set()
        return await b_inner(turn)

    rewire(runtimes, team["a"], a_reply)
    rewire(runtimes, team["b"], b_reply)
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await within(b_asked.wait(), "b asked for its minutes while a writes its own")
    await over(hub, operator, meeting.id)
    minutes = await hub.meetings.minutes(operator, meeting.id)
    assert sorted((m.agent_id, m.status) for m in minutes) == [
        ("a", "delivered"),
        ("b", "delivered"),
    ]


async def test_a_post_while_the_members_write_their_minutes_is_refused_not_lost(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    """The meeting is over once its minutes are being written: a post then would land after
    every speech and in no member's minutes, so it is refused and says why."""
    team = await members(make_agent, runtimes, ["a"])
    asked, release = asyncio.Event(), asyncio.Event()
    inner = team["a"].reply

    async def a_reply(turn: Turn) -> str:
        if is_minutes(turn):
            asked.set()
            await release.wait()
        return await inner(turn)

    rewire(runtimes, team["a"], a_reply)
    room = await room_with(hub, operator, ["a"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    try:
        await within(asked.wait(), "a asked for its minutes")
        before = await hub.channels.messages(operator, meeting.channel_id)
        with pytest.raises(Conflict) as refused:
            await hub.meetings.post(operator, meeting.id, "one more thing")
        assert refused.value.code == "meeting_ended"
        assert "writing their minutes" in refused.value.message
        assert await hub.channels.messages(operator, meeting.channel_id) == before
    finally:
        release.set()
    await over(hub, operator, meeting.id)


# -- 7: an answer to a stopped turn is refused as cancelled ---------------------------------------
async def test_answering_a_turn_the_stop_cancelled_is_refused_as_turn_cancelled(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    await make_agent("r", runtime={"kind": "remote"})
    room = await room_with(hub, operator, ["r"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    r = await hub.identity.require("r")
    turn = await hub.turns.next(r, timeout_s=30)
    assert turn is not None
    await hub.meetings.stop(operator)
    with pytest.raises(Conflict) as caught:
        await hub.turns.speak(r, turn.id, "too late")
    assert caught.value.code == "turn_cancelled"
    assert "stopped" in caught.value.message and meeting.id in caught.value.message


# -- 10: one meeting stops alone ---------------------------------------------------------------
async def test_stopping_one_meeting_leaves_the_others_running(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].speech_gate = asyncio.Event()
    team["b"].speech_gate = asyncio.Event()
    one = await room_with(hub, operator, ["a"])
    two = await room_with(hub, operator, ["b"])
    first = await hub.meetings.convene(operator, one.id, ConveneSpec(topic="one"))
    second = await hub.meetings.convene(operator, two.id, ConveneSpec(topic="two"))
    await within(team["a"].speech_started.wait(), "team[a].speech_started")
    await within(team["b"].speech_started.wait(), "team[b].speech_started")
    stopped = await hub.meetings.stop_meeting(operator, first.id)
    assert (stopped.id, stopped.status, stopped.end_reason) == (first.id, "ended", "stopped")
    assert (await hub.meetings.get(operator, second.id)).status == "running"
    # The transcript says who stopped it, and that it was this meeting's own stop.
    [*_, note] = await hub.channels.messages(operator, stopped.channel_id)
    assert note.content == "[Meeting stopped] Operator stopped this meeting."
    with pytest.raises(Conflict) as caught:
        await hub.meetings.stop_meeting(operator, first.id)
    assert caught.value.code == "meeting_ended"
    team["b"].speech_gate.set()
    await over(hub, operator, second.id)


# -- 11: one round everywhere --------------------------------------------------------------------
async def test_a_meeting_stopped_between_rounds_shows_one_round_on_every_view(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].decisions = [{"action": "invite", "next": "a"}, {"action": "invite", "next": "b"}]
    gate = GatedModerator(runtimes, team["a"], at=3)  # round 1 is over; round 2 not begun
    room = await room_with(hub, operator, ["a", "b"], max_rounds=2)
    a = await hub.identity.require("a")
    meeting = await hub.meetings.convene(a, room.id, ConveneSpec(topic="t"))
    await within(gate.started.wait(), "gate.started")
    [stopped] = await hub.meetings.stop(operator)
    assert (stopped.end_reason, stopped.turns) == ("stopped", 2)
    [*_, note] = await hub.channels.messages(operator, stopped.channel_id)
    assert note.content == (
        "[Meeting stopped] Operator used the emergency stop, which ends every meeting."
    )
    # The overview reads the stored round; the meeting's page, the CLI and the API the roll.
    assert stopped.round == roll_call(stopped).round == 1
    assert (await hub.meetings.get(operator, meeting.id)).round == 1


# -- 12: a worker's prompt names the channel it is in --------------------------------------------
async def test_a_workers_task_prompt_does_not_call_its_session_its_work_channel(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await within(hub.tasks.wait_idle(), "tasks idle")
    system = lead.turns[0].prompt.system
    assert "This is your work channel" not in system
    assert "session of a task given to you as a worker" in system
    agent = await hub.identity.require("lead")
    assert agent.work_channel_id is not None
    await hub.channels.post(operator, agent.work_channel_id, "and in your own channel?")
    await within(hub.tasks.wait_idle(), "tasks idle")
    assert "This is your work channel" in lead.turns[-1].prompt.system
