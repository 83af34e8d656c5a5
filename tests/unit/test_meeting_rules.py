"""The pure rules of meetings (core/meetings.py): every member transition and every illegal one,
the moderator's parsing and fallback, budgets, minutes validation, stall signals, throttling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from parley.core import meetings as mt
from parley.core.errors import Conflict
from parley.core.rooms import Attendee, Meeting

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


# -- transitions ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("state", "after"),
    [("working", "awaiting-entry"), ("idle-waiting", "in-meeting"), ("done", "in-meeting")],
)
def test_summon_moves_each_activity_state(state: str, after: str) -> None:
    assert mt.summon(state) == after  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["awaiting-entry", "in-meeting"])
def test_summoning_a_summoned_member_raises(state: str) -> None:
    with pytest.raises(mt.IllegalTransition) as caught:
        mt.summon(state)  # type: ignore[arg-type]
    assert isinstance(caught.value, Conflict)
    assert caught.value.code == "illegal_member_transition"


def test_enter_only_from_awaiting_entry() -> None:
    assert mt.enter("awaiting-entry") == "in-meeting"
    for state in ("working", "idle-waiting", "done", "in-meeting"):
        with pytest.raises(mt.IllegalTransition):
            mt.enter(state)  # type: ignore[arg-type]


@pytest.mark.parametrize("before", ["working", "idle-waiting", "done"])
@pytest.mark.parametrize("state", ["awaiting-entry", "in-meeting"])
def test_dismiss_restores_the_state_the_summons_found(state: str, before: str) -> None:
    assert mt.dismiss(state, before) == before  # type: ignore[arg-type]


def test_dismiss_does_not_send_everyone_back_to_working() -> None:
    """Source 002 §5.12: an idle member summoned and dismissed is idle again, so the next
    summons lets it enter at once instead of waiting for a turn end that never comes."""
    state = mt.summon("idle-waiting")
    restored = mt.dismiss(state, "idle-waiting")
    assert restored == "idle-waiting"
    assert mt.summon(restored) == "in-meeting"
    # The one who never came (still awaiting entry) is restored too.
    assert mt.dismiss(mt.summon("working"), "working") == "working"
    assert mt.dismiss(mt.summon("done"), "done") == "done"


@pytest.mark.parametrize("state", ["working", "idle-waiting", "done"])
def test_dismissing_an_unsummoned_member_raises(state: str) -> None:
    with pytest.raises(mt.IllegalTransition):
        mt.dismiss(state, "idle-waiting")  # type: ignore[arg-type]


def test_dismiss_without_a_recorded_state_raises() -> None:
    with pytest.raises(mt.IllegalTransition):
        mt.dismiss("in-meeting", None)
    with pytest.raises(mt.IllegalTransition):
        mt.dismiss("in-meeting", "in-meeting")


def test_activity_is_observed_not_declared() -> None:
    assert mt.activity(in_flight=True, recorded="done") == "working"
    assert mt.activity(in_flight=False, recorded="done") == "done"
    assert mt.activity(in_flight=False, recorded="working") == "idle-waiting"


# -- moderator ----------------------------------------------------------------------------------
PRESENT = ["a", "b", "c"]


def test_invite_and_adjourn_are_parsed() -> None:
    counts = {"a": 1, "b": 1, "c": 1}
    got = mt.parse_decision(
        '{"action":"invite","next":"b"}', present=PRESENT, counts=counts, last="a"
    )
    assert got == mt.Decision("invite", "b")
    got = mt.parse_decision('ok: {"action": "adjourn"}', present=PRESENT, counts=counts, last="a")
    assert got == mt.Decision("adjourn")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("let b speak", "unparseable"),
        ("{not json}", "unparseable"),
        ('{"action":"dance"}', "unknown_action"),
        ('{"action":"invite"}', "no_speaker"),
        ('{"action":"invite","next":"zed"}', "absent_speaker"),
        ('{"action":"adjourn"}', "adjourn_before_everyone_spoke"),
    ],
)
def test_unusable_answers_fall_back_to_safe_rotation(text: str, reason: str) -> None:
    counts = {"a": 1, "b": 0, "c": 1}
    got = mt.parse_decision(text, present=PRESENT, counts=counts, last="a")
    assert got.action == "invite"
    assert got.next == "b"  # the one who has spoken least
    assert got.fallback == reason


def test_a_moderator_failure_falls_back_and_says_why() -> None:
    got = mt.parse_decision(None, present=PRESENT, counts={}, last=None, failure="runtime_timeout")
    assert got.next == "a"
    assert got.fallback == "moderator_failed: runtime_timeout"


def test_safe_rotation_skips_the_last_speaker_when_it_can() -> None:
    assert mt.safe_rotation(["a", "b"], {"a": 0, "b": 0}, "a") == "b"
    assert mt.safe_rotation(["a"], {"a": 3}, "a") == "a"


def test_round_cap() -> None:
    assert mt.round_of(0, 3) == 1
    assert mt.round_of(3, 3) == 2
    assert not mt.round_cap_reached(5, 3, 2)
    assert mt.round_cap_reached(6, 3, 2)


def test_the_roll_call_of_a_running_and_an_ended_meeting() -> None:
    meeting = Meeting(
        id="m",
        room_id="r",
        channel_id="c",
        topic="t",
        convened_by="a",
        max_rounds=2,
        turns=5,
        round=3,
        attendees=[
            Attendee(agent_id="a", before="idle-waiting", attendance="present", entered_round=1),
            Attendee(agent_id="w", before="working", attendance="awaiting"),
            Attendee(agent_id="x", before="working", attendance="absent"),
        ],
        created=datetime(2025, 1, 1, tzinfo=UTC),
    )
    assert mt.present(meeting) == ["a"]
    # The round is the one the driver stored for the turn it gave, capped at 2/2.
    assert mt.roll_call(meeting) == mt.RollCall(["a"], ["w"], ["x"], 2)
    assert mt.roll_call(meeting.model_copy(update={"round": 0})).round == 1
    ended = mt.roll_call(meeting.model_copy(update={"status": "ended"}))
    # Nobody awaits entry to a meeting that is over: who never came was absent.
    assert (ended.awaiting, ended.absent) == ([], ["x", "w"])


# -- budgets and minutes ------------------------------------------------------------------------
def test_over_limit_speech_gets_one_retry_then_fails() -> None:
    assert mt.judge_speech("x" * 1600, limit=1600, attempt=1) == "accepted"
    assert mt.judge_speech("x" * 1601, limit=1600, attempt=1) == "retry"
    assert mt.judge_speech("x" * 1601, limit=1600, attempt=2) == "failed"
    assert "1600" in mt.retry_instructions(1600, 1601)


def test_minutes_validation() -> None:
    ok = dict(transcript_chars=500, limit=200, others=["other minutes"])
    assert mt.validate_minutes("mine", **ok) is None  # type: ignore[arg-type]
    assert mt.validate_minutes("  ", **ok) == "empty"  # type: ignore[arg-type]
    assert mt.validate_minutes("x" * 201, **ok) == "over_limit"  # type: ignore[arg-type]
    assert (
        mt.validate_minutes("x" * 150, transcript_chars=100, limit=200, others=[])
        == "not_shorter_than_transcript"
    )
    assert mt.validate_minutes("other minutes ", **ok) == "identical_to_another"  # type: ignore[arg-type]
    assert mt.validate_minutes("mine\x00", **ok) == "invalid_text"  # type: ignore[arg-type]


# -- prompts ------------------------------------------------------------------------------------
def test_projection_is_bounded_and_keeps_the_newest() -> None:
    work = [("me", f"step {i} " + "x" * 50) for i in range(100)]
    text = mt.project_context(work, [("subject", "body")], 300)
    assert len(text) <= 300 + 40  # the section titles
    assert "step 99" in text and "step 0 " not in text


def test_entry_prompt_positions_without_a_template() -> None:
    text = mt.entry_prompt(
        name="alice",
        topic="costs",
        convened_by="bob",
        present=["alice", "bob", "human:op"],
        target=800,
        projection="Your recent work:\n- me: MARK",
    )
    for part in ("alice", "costs", "bob", "human:op", "800", "do not count", "MARK"):
        assert part in text
    assert "first round" not in mt.speech_instructions(first=False)
    assert "where you stand" in mt.speech_instructions(first=True)


def test_entry_prompt_names_the_humans_present_and_claims_none_when_there_are_none() -> None:
    def rules(humans: list[str]) -> str:
        return mt.entry_prompt(
            name="alice",
            topic="costs",
            convened_by="bob",
            present=["alice", "bob", *humans],
            target=800,
            projection="",
            humans=humans,
        )

    assert "operator (human) may speak at any time" in rules(["operator"])
    alone = rules([])
    assert "Humans present" not in alone and "(human)" not in alone
    assert "A person may join and interject at any time" in alone


def test_moderator_prompt_says_it_has_no_context() -> None:
    text = mt.moderator_prompt(
        topic="t",
        roster=PRESENT,
        present=PRESENT,
        not_spoken=["c"],
        counts={"a": 2},
        round_number=1,
        max_rounds=3,
    )
    assert "NO private context" in text and "Not yet spoken: c" in text and '"adjourn"' in text


# -- stall and throttle -------------------------------------------------------------------------
def _obs(
    member: str, active_ago: float | None, brief_ago: float | None, fps: tuple[str, ...] = ()
) -> mt.MemberObservation:
    return mt.MemberObservation(
        member,
        None if active_ago is None else NOW - timedelta(seconds=active_ago),
        None if brief_ago is None else NOW - timedelta(seconds=brief_ago),
        fps,
    )


def _detect(
    members: list[mt.MemberObservation], progress_ago: float | None
) -> set[tuple[str, str | None]]:
    signals = mt.detect_stall(
        NOW,
        members,
        last_progress=None if progress_ago is None else NOW - timedelta(seconds=progress_ago),
        silent_after=timedelta(seconds=100),
        brief_stale_after=timedelta(seconds=200),
        no_progress_after=timedelta(seconds=300),
        repeat_window=3,
    )
    return {(s.kind, s.member) for s in signals}


def test_no_signal_when_all_is_fresh() -> None:
    assert _detect([_obs("a", 10, 10, ("x", "y", "z"))], 10) == set()


def test_each_stall_signal() -> None:
    fp = mt.fingerprint("Still failing test 12")
    assert fp == mt.fingerprint("still  failing TEST 13")
    got = _detect(
        [_obs("a", 101, None), _obs("b", 10, 201), _obs("c", 10, 10, ("q", fp, fp, fp))], 301
    )
    assert got == {
        ("silent_slot", "a"),
        ("stale_briefing", "b"),
        ("repeated_fingerprint", "c"),
        ("no_progress", None),
    }


def test_throttle_and_stall_bypass() -> None:
    hour = timedelta(hours=1)
    recent = NOW - timedelta(minutes=5)
    assert mt.may_convene(NOW, recent, min_interval=hour, stalled=False) == (False, "throttled")
    assert mt.may_convene(NOW, recent, min_interval=hour, stalled=True) == (True, "stall")
    assert mt.may_convene(NOW, None, min_interval=hour, stalled=False) == (True, "due")


def test_pulse_conclusion_is_stable() -> None:
    a = [mt.StallSignal("silent_slot", "a", "x"), mt.StallSignal("no_progress", None, "y")]
    assert mt.pulse_conclusion(a) == mt.pulse_conclusion(list(reversed(a)))
    assert mt.pulse_conclusion([]) == "ok"
