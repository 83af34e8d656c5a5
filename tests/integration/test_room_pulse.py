"""The light path of rooms (R10): the briefing board, the stall detector computed from outside,
``pulse`` escalating a stall to a meeting convened by the human seat, and its log."""

from __future__ import annotations

import asyncio

import pytest

from parley.core.errors import Conflict, InvalidRequest, PermissionDenied
from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import members, room_with

QUIET = dict(
    silent_after_s=600.0,
    brief_stale_after_s=1200.0,
    no_progress_after_s=1800.0,
    min_meeting_interval_s=3600.0,
    max_rounds=1,
)


async def test_briefs_are_bounded_and_the_latest_kept_per_member(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await members(make_agent, runtimes, ["a", "b", "d"])
    room = await room_with(hub, operator, ["a", "b"], briefs_kept=2, brief_max_chars=60)
    a = await hub.identity.require("a")
    with pytest.raises(InvalidRequest) as caught:
        await hub.rooms.post_brief(a, "x" * 61)
    assert caught.value.code == "brief_too_long"
    with pytest.raises(PermissionDenied) as caught:
        await hub.rooms.post_brief(await hub.identity.require("d"), "hello")
    assert caught.value.code == "not_a_room_member"
    for i in range(3):
        await hub.rooms.post_brief(a, f"a brief {i}")
    await hub.rooms.post_brief(await hub.identity.require("b"), "b brief")
    board = await hub.rooms.board(operator, room.id)
    assert [x.text for x in board] == ["a brief 1", "a brief 2", "b brief"]
    assert hub.rooms.board_summary(board) == "- a:\n> a brief 2\n- b:\n> b brief"


async def test_a_quiet_room_is_not_escalated_and_the_log_is_written_once(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await members(make_agent, runtimes, ["a"])
    room = await room_with(hub, operator, ["a"], **QUIET)
    first = await hub.pulse.pulse(operator, room.id)
    second = await hub.pulse.pulse(operator, room.id)
    assert (first.conclusion, first.escalated, first.logged) == ("ok", False, True)
    assert (second.conclusion, second.logged) == ("ok", False)
    assert len(await hub.pulse.log(operator, room.id)) == 1


async def test_a_stall_escalates_to_a_meeting_of_the_human_seat_despite_the_throttle(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
) -> None:
    await members(make_agent, runtimes, ["a", "b"])
    room = await room_with(hub, operator, ["a", "b"], **QUIET)
    a = await hub.identity.require("a")
    # A meeting just ended: the throttle alone would refuse another one.
    earlier = await hub.meetings.convene(a, room.id, ConveneSpec(topic="t"))
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    # The throttle holds an agent convening again within min_meeting_interval_s.
    with pytest.raises(Conflict) as caught:
        await hub.meetings.convene(a, room.id, ConveneSpec(topic="again"))
    assert caught.value.code == "meeting_throttled"
    for _ in range(3):
        await hub.rooms.post_brief(a, "still stuck on test 7")
    await hub.rooms.post_brief(await hub.identity.require("b"), "fine")
    result = await hub.pulse.pulse(operator, room.id)
    assert result.escalated
    assert {"kind": "repeated_fingerprint", "member": "a"} in [
        {"kind": s["kind"], "member": s["member"]} for s in result.signals
    ]
    # ... and the stall bypasses it, and says so.
    assert result.reason == "escalated (stall, bypassing min_meeting_interval_s)"
    assert result.meeting_id is not None and result.meeting_id != earlier.id
    meeting = await hub.meetings.get(operator, result.meeting_id)
    assert meeting.convened_by == "operator"
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    # The board went out without any model call, as mail to each member.
    notices = await hub.mail.inbox(operator, "b", InboxFilter(kind="notice"))
    assert any("still stuck" in m.body for m in notices)
    clock.advance(10)
    assert len(await hub.pulse.log(operator, room.id)) == 1


async def test_a_failed_escalation_returns_its_reason_and_never_raises(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
) -> None:
    team = await members(make_agent, runtimes, ["a"])
    team["a"].work_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a"], **QUIET)
    agent = await hub.identity.require("a")
    assert agent.work_channel_id is not None
    clock.advance(3600)  # silent and no progress: stalled
    await hub.channels.post(operator, agent.work_channel_id, "go")
    await team["a"].work_started.wait()
    result = await hub.pulse.pulse(operator, room.id)
    assert result.conclusion.startswith("stalled")
    assert not result.escalated
    assert "nobody_can_enter" in result.reason
    team["a"].work_gate.set()
    await hub.tasks.wait_idle()
