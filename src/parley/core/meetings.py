"""Meeting rules that need no I/O (R2–R10): the member state machine of summons, entry and
dismissal, the moderator's control channel and its safe fallback, speech budgets, minutes
validation, the prompts, the bounded projection of a member's own context, stall signals and
the throttle of meetings.

State machine of a member (source 002 §1.3)::

    working      --summon-->  awaiting-entry  --enter (turn end)-->  in-meeting
    idle-waiting --summon-->  in-meeting
    done         --summon-->  in-meeting
    awaiting-entry / in-meeting  --dismiss-->  the state the summons found
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from parley.core import quoting as q
from parley.core.errors import Conflict
from parley.core.identity import MODERATOR_ID
from parley.core.limits import text_problem
from parley.core.rooms import ActivityState, Meeting, MemberState

# -- the member state machine ---------------------------------------------------------------------


class IllegalTransition(Conflict):
    """This member state change is not allowed."""

    code = "illegal_member_transition"


ACTIVITY_STATES: frozenset[str] = frozenset({"working", "idle-waiting", "done"})


def summon(state: MemberState) -> MemberState:
    """Where a summons puts a member: a working one waits for its work-unit boundary, an idle or
    done one enters at once. A member already summoned cannot be summoned again."""
    if state == "working":
        return "awaiting-entry"
    if state in ("idle-waiting", "done"):
        return "in-meeting"
    raise IllegalTransition(
        f"a member in state {state!r} is already summoned; wait for the meeting to end",
        state=state,
        action="summon",
    )


def enter(state: MemberState) -> MemberState:
    """A member awaiting entry reached its boundary and enters."""
    if state != "awaiting-entry":
        raise IllegalTransition(
            f"only a member awaiting entry can enter; this one is {state!r}",
            state=state,
            action="enter",
        )
    return "in-meeting"


def dismiss(state: MemberState, before: MemberState | None) -> MemberState:
    """The state a member goes back to when the meeting ends: the one the summons found.

    Not "working" for everyone (source 002 §5.12): a member summoned while idle and sent back as
    "working" waits at the next summons for a turn end that never comes, and the room can never
    meet again. Late entrants and those who never came are restored the same way."""
    if state not in ("awaiting-entry", "in-meeting"):
        raise IllegalTransition(
            f"only a summoned member can be dismissed; this one is {state!r}",
            state=state,
            action="dismiss",
        )
    if before is None or before not in ACTIVITY_STATES:
        raise IllegalTransition(
            f"cannot restore a member to {before!r}: a summons records working, idle-waiting "
            "or done",
            state=state,
            action="dismiss",
        )
    return before


def activity(*, in_flight: bool, recorded: MemberState) -> ActivityState:
    """A member's activity as the hub observes it: working while a turn is in flight, else done
    if it marked its work done, else idle-waiting. The member's own say-so is never asked."""
    if in_flight:
        return "working"
    return "done" if recorded == "done" else "idle-waiting"


# -- the moderator --------------------------------------------------------------------------------

ModeratorAction = Literal["invite", "adjourn"]


@dataclass(frozen=True)
class Decision:
    """What happens next, and why the moderator's answer was not followed when it was not."""

    action: ModeratorAction
    next: str | None = None
    fallback: str | None = None


def safe_rotation(present: Sequence[str], counts: Mapping[str, int], last: str | None) -> str:
    """The next speaker without a moderator: whoever has spoken least, in roster order, not the
    one who just spoke when anyone else is there."""
    candidates = [m for m in present if m != last] or list(present)
    return min(candidates, key=lambda m: (counts.get(m, 0), present.index(m)))


ROTATION = "rotation"
"""The moderator of a meeting with no moderator model: the name it has in views and events."""


def rotation(present: Sequence[str], counts: Mapping[str, int], last: str | None) -> Decision:
    """Rotation as the moderator (no model to ask): invite whoever has not spoken, then each in
    roster order; the round cap ends the meeting. Nothing failed, so no fallback is recorded."""
    return Decision("invite", safe_rotation(present, counts, last))


_JSON = re.compile(r"\{.*\}", re.DOTALL)


def parse_decision(
    text: str | None,
    *,
    present: Sequence[str],
    counts: Mapping[str, int],
    last: str | None,
    failure: str | None = None,
) -> Decision:
    """The moderator's JSON answer (``{"action":"invite","next":ID}`` or ``{"action":
    "adjourn"}``), or safe rotation with the reason when it is unusable: a failure, no JSON, an
    unknown action, an absent or unknown speaker, or adjourning before everyone present has
    spoken once."""

    def fallback(reason: str) -> Decision:
        return Decision("invite", safe_rotation(present, counts, last), fallback=reason)

    if failure is not None:
        return fallback(f"moderator_failed: {failure}")
    match = _JSON.search(text or "")
    if match is None:
        return fallback("unparseable")
    try:
        data = json.loads(match.group(0))
    except ValueError:
        return fallback("unparseable")
    if not isinstance(data, dict):
        return fallback("unparseable")
    action = data.get("action")
    if action == "adjourn":
        if any(counts.get(m, 0) == 0 for m in present):
            return fallback("adjourn_before_everyone_spoke")
        return Decision("adjourn")
    if action != "invite":
        return fallback("unknown_action")
    chosen = data.get("next")
    if not isinstance(chosen, str) or not chosen:
        return fallback("no_speaker")
    if chosen not in present:
        return fallback("absent_speaker")
    return Decision("invite", chosen)


def round_of(turns: int, present: int) -> int:
    """The round a meeting is in: one round is as many turns as members present (a failed
    speech is a turn too)."""
    return turns // max(1, present) + 1


def round_cap_reached(turns: int, present: int, max_rounds: int) -> bool:
    """Whether the meeting has had its rounds; the cap always ends it, whatever the moderator."""
    return turns >= max_rounds * max(1, present)


def present(meeting: Meeting) -> list[str]:
    """The attendees in the meeting now, in roster order."""
    return [a.agent_id for a in meeting.attendees if a.attendance == "present"]


@dataclass(frozen=True)
class RollCall:
    """A meeting as its views show it: who is present, awaited or absent, and its round."""

    present: list[str]
    awaiting: list[str]
    absent: list[str]
    round: int


def roll_call(meeting: Meeting) -> RollCall:
    """Once a meeting has ended nobody awaits entry (a member that never came is absent), and
    the round shown never passes the cap."""
    here = present(meeting)
    awaiting = [a.agent_id for a in meeting.attendees if a.attendance == "awaiting"]
    absent = [a.agent_id for a in meeting.attendees if a.attendance == "absent"]
    if meeting.status == "ended":
        absent, awaiting = absent + awaiting, []
    return RollCall(here, awaiting, absent, shown_round(meeting))


def shown_round(meeting: Meeting) -> int:
    """The one round every view shows: the round of the turn given now, or of the last one
    given (the driver stores it when it gives a turn); 1 before any turn, never past the cap."""
    return min(max(1, meeting.round), meeting.max_rounds)


# -- budgets and minutes --------------------------------------------------------------------------

SpeechVerdict = Literal["accepted", "retry", "failed"]


def judge_speech(text: str, *, limit: int, attempt: int) -> SpeechVerdict:
    """A speech over the hard limit is rejected, never truncated (a truncated speech lets its
    speaker believe it was heard): asked once more with the limit stated, then failed."""
    if len(text) <= limit:
        return "accepted"
    return "retry" if attempt == 1 else "failed"


def retry_instructions(limit: int, size: int) -> str:
    return (
        f"Your speech had {size} characters; the hard limit is {limit}. It was not posted. "
        f"Say it again in fewer than {limit} characters."
    )


def validate_minutes(
    text: str, *, transcript_chars: int, limit: int, others: Sequence[str]
) -> str | None:
    """Why a member's minutes are refused, or None: they must be non-empty, storable, shorter
    than the transcript (minutes that grow copy the meeting instead of compressing it), within
    the limit and not identical to another member's (one set of minutes for all is a
    broadcast)."""
    stripped = text.strip()
    if not stripped:
        return "empty"
    if text_problem(stripped) is not None:
        return "invalid_text"
    if len(stripped) > limit:
        return "over_limit"
    if len(stripped) >= transcript_chars:
        return "not_shorter_than_transcript"
    if any(stripped == other.strip() for other in others):
        return "identical_to_another"
    return None


# -- prompts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeakerSources:
    """What a speaker's prompt reads from the store: the meeting channel's members (humans
    included), sender and content of its latest work-channel messages in channel order, and
    kind, subject and body of its latest open mails other than minutes, in inbox order."""

    channel_members: list[str]
    work: list[tuple[str, str]]
    mail: list[tuple[str, str, str]]


def project_context(
    transcript: Sequence[tuple[str, str]], mail: Sequence[tuple[str, str]], max_chars: int
) -> str:
    """A bounded projection of a member's OWN context: its latest work-channel messages and its
    open mail (the hub's own notices are not given here: they are bookkeeping, not the member's
    context), within ``max_chars``. The stated priority: each of the two gets at least half the
    budget, newest first, and what one leaves unused the other may take; its persona comes
    before both, whole, in the prompt. Empty when there is nothing. Each item is one line
    (``- <sender>: …`` or ``- "<subject>": …``): no text in it can break its line."""
    work = [q.flat(f"- {q.label(who)}: {what}") for who, what in reversed(transcript)]
    letters = [q.flat(f"- {q.inline(subject)}: {body}") for subject, body in reversed(mail)]
    half = max_chars // 2
    work_share = max_chars - min(half, _size(letters))
    kept_work = _newest_within(work, work_share)
    kept_mail = _newest_within(letters, max_chars - sum(len(i) for i in kept_work))
    lines: list[str] = []
    if kept_work:
        lines += ["Your recent work:", *reversed(kept_work)]
    if kept_mail:
        lines += ["Your open mail:", *kept_mail]
    return "\n".join(lines)


def _size(items: Sequence[str]) -> int:
    return sum(len(i) for i in items)


def _newest_within(items: Sequence[str], budget: int) -> list[str]:
    """The items (newest first) that fit in ``budget``; the first that does not is cut with an
    ellipsis when a useful part of it fits."""
    kept: list[str] = []
    used = 0
    for item in items:
        if used + len(item) > budget:
            room = budget - used
            if room > 40:
                kept.append(item[: room - 1] + "…")
            break
        kept.append(item)
        used += len(item)
    return kept


def entry_prompt(
    *,
    name: str,
    topic: str,
    convened_by: str,
    present: Sequence[str],
    target: int,
    projection: str,
    awaiting: Sequence[str] = (),
    absent: Sequence[str] = (),
    humans: Sequence[str] = (),
) -> str:
    """The positioning prompt of an entrant (R3): who it is, the topic, who convened, who is
    present (``humans`` among them), who is summoned but not in the meeting yet and who never
    came, what it may say, the rules; no answer template."""
    speak_freely = (
        f"- {', '.join(q.label(h) for h in humans)} (human) may speak at any time.\n"
        if humans
        else "- A person may join and interject at any time.\n"
    )
    text = (
        f"[Meeting] You are {q.label(name)}.\n"
        f"Topic: {q.inline(topic)}\n"
        f"Convened by: {q.label(convened_by)}\n"
        f"{attendance_lines(present, awaiting, absent)}\n\n"
        "You were called to this meeting. Say what the others do not know but should, about "
        "your own direction: where you are, what blocks you, what you need from whom.\n"
        "Rules:\n"
        "- The moderator decides who speaks; you will be called when it is your turn.\n"
        f"- About {target} characters per speech; do not count, and do not use tools to "
        "check the length.\n"
        "- No fixed format: say it however it is clearest.\n"
        f"{speak_freely}"
    )
    if projection:
        text += (
            "\nYour own private context (only you see it; quote from it only what the meeting "
            f"needs):\n{projection}\n"
        )
    return text


def attendance_lines(present: Sequence[str], awaiting: Sequence[str], absent: Sequence[str]) -> str:
    """Who is in the meeting as it is: present, summoned but still at work (awaiting entry), and
    summoned but not coming (absent); the last two only when there are any."""
    lines = [f"Present: {', '.join(q.label(p) for p in present) or 'nobody yet'}"]
    if awaiting:
        lines.append(
            f"Awaiting entry (summoned, still finishing a turn): "
            f"{', '.join(q.label(p) for p in awaiting)}"
        )
    if absent:
        lines.append(f"Absent (summoned, not coming): {', '.join(q.label(p) for p in absent)}")
    return "\n".join(lines)


def speech_instructions(*, first: bool) -> str:
    """The first speech reports where the member stands; later ones respond to the others."""
    if first:
        return (
            "Say where you stand: what you are doing, where you are stuck, what you need. "
            "Speak as yourself; no tools."
        )
    return (
        "Respond to what the others said: answer their questions, test their assumptions, "
        "agree on who does what. Speak as yourself; no tools."
    )


def moderator_prompt(
    *,
    topic: str,
    roster: Sequence[str],
    present: Sequence[str],
    not_spoken: Sequence[str],
    counts: Mapping[str, int],
    round_number: int,
    max_rounds: int,
    awaiting: Sequence[str] = (),
    absent: Sequence[str] = (),
) -> str:
    """What the moderator sees: the topic, the roster, who has not spoken and the speech counts
    (and the transcript, given beside it). Nobody's private context, so nobody can bias it."""
    tally = ", ".join(f"{q.label(m)}: {counts.get(m, 0)}" for m in present)
    return (
        "You moderate this meeting. You have NO private context of any participant: you see "
        "only the topic, the transcript, the roster, who has not spoken and speech counts.\n"
        f"Topic: {q.inline(topic)}\n"
        f"Roster: {', '.join(q.label(m) for m in roster)}\n"
        f"{attendance_lines(present, awaiting, absent)}\n"
        "Only those present can be given the floor.\n"
        f"Not yet spoken: {', '.join(q.label(m) for m in not_spoken) or 'everyone has spoken'}\n"
        f"Speeches so far: {tally}\n"
        f"Round {round_number} of {max_rounds}.\n"
        'Answer with JSON only: {"action":"invite","next":"<member id>"} to give the floor, '
        'or {"action":"adjourn"} to end the meeting.'
    )


def minutes_prompt(*, name: str, topic: str, limit: int) -> str:
    return (
        f"The meeting on {q.inline(topic)} is over. You are {q.label(name)}. Write YOUR "
        "minutes: only what matters to you and your work (decisions that affect you, what you "
        "must do, what others expect from you), shorter than the transcript and under "
        f"{limit} characters. Plain text; no tools."
    )


ABSENTEE_MARK = "written_for_absentee"
"""The reason a minutes row carries when the hub wrote it for a member that never entered."""


def absentee_notice(
    *,
    agent_id: str,
    name: str,
    topic: str,
    end_reason: str,
    speeches: Sequence[tuple[str, str]],
    limit: int,
    humans: Collection[str] = (),
) -> str:
    """The outcome of a meeting for a summoned member that never entered, written by the hub
    (no model: it was not there to be asked): how the meeting ended, what was said about it by
    name, then each speaker's last word, within ``limit`` characters. ``speeches`` are
    (speaker, text) in transcript order; those of ``humans`` are posts, counted apart, as the
    meeting counts only its members' speeches."""
    names = {n.lower() for n in (agent_id, name) if n}
    members = list(dict.fromkeys(who for who, _ in speeches if who not in humans))
    people = list(dict.fromkeys(who for who, _ in speeches if who in humans))
    spoken = sum(1 for who, _ in speeches if who not in humans)
    posts = len(speeches) - spoken
    head = (
        f"[Outcome notice written for an absentee] You were summoned to the meeting on "
        f"{q.inline(topic, limit=120)} and did not enter it. It ended ({end_reason}) after "
        f"{_count(spoken, 'speech', 'speeches')}"
        + (f" by {', '.join(q.label(s) for s in members)}" if members else "")
        + (
            f", with {_count(posts, 'post', 'posts')} by {', '.join(q.label(s) for s in people)}"
            if people
            else ""
        )
        + "."
    )
    about = [
        f"- {q.label(who)}: {q.flat(text)}"
        for who, text in speeches
        if any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text.lower()) for n in names)
    ]
    last: dict[str, str] = {}
    for who, text in speeches:
        last[who] = text
    closing = [f"- {q.label(who)}: {q.flat(text)}" for who, text in last.items()]
    parts = [head]
    used = len(head)
    for title, items in (("What concerns you, by name:", about), ("Last word of each:", closing)):
        if not items:
            continue
        share = (limit - used - len(title) - 2) // max(1, len(items))
        if share < 60:
            break
        kept = [i if len(i) <= share else i[: share - 1] + "…" for i in items]
        parts.append(title + "\n" + "\n".join(kept))
        used += len(parts[-1]) + 1
    if not about:
        parts.insert(1, "Nobody named you.")
    return "\n".join(parts)[:limit]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def convened_note(
    convener: str, topic: str, *, escalated: bool = False, triggered_by: str | None = None
) -> str:
    """The moderator's first message in a meeting's channel: who convened it, or, for a stall a
    pulse escalated, the seat it was convened as and who ran that pulse (None: the scheduled
    one)."""
    who = q.label(convener)
    if escalated:
        pulse = (
            "the scheduled pulse"
            if triggered_by is None
            else f"a pulse run by {q.label(triggered_by)}"
        )
        who = f"{who} (the escalation seat) after {pulse} found a stall"
    return f"[Meeting convened by {who}] Topic: {q.inline(topic)}"


_MINUTES_HEAD = "[Meeting minutes: "


def minutes_message(topic: str, text: str) -> str:
    """A member's minutes as they wake it in its work channel: the hub's line naming the
    meeting, then the minutes its runtime wrote, quoted."""
    return q.attributed(
        f"{_MINUTES_HEAD}{q.inline(topic, limit=120)}]\nYour minutes of this meeting:", text
    )


def is_minutes_post(sender_id: str, content: str) -> bool:
    """Whether a work-channel message is the hub's copy of a member's minutes: bookkeeping,
    like the minutes mail, which never takes the member's context budget in a meeting (only
    the hub posts as the moderator)."""
    return sender_id == MODERATOR_ID and content.startswith(_MINUTES_HEAD)


# -- the light path: briefs, stall signals, throttle ----------------------------------------------


def board_text(latest: Sequence[tuple[str, str]]) -> str:
    """The briefing board as one text: each (member, brief) under the member's name, quoted."""
    return "\n".join(q.attributed(f"- {q.label(agent)}:", brief) for agent, brief in latest)


StallKind = Literal["silent_slot", "stale_briefing", "repeated_fingerprint", "no_progress"]


def fingerprint(text: str) -> str:
    """A content fingerprint that ignores case, spacing and digits, so an agent repeating the
    same conclusion with a new counter still repeats."""
    normal = re.sub(r"\d+", "#", re.sub(r"\s+", " ", text.strip().lower()))
    return hashlib.sha256(normal.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StallSignal:
    kind: StallKind
    member: str | None
    detail: str

    def as_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind, "member": self.member, "detail": self.detail}


@dataclass(frozen=True)
class MemberObservation:
    """What the hub saw of one member, never what it said about itself."""

    agent_id: str
    last_activity: datetime | None
    last_brief: datetime | None
    recent_fingerprints: tuple[str, ...]


def detect_stall(
    now: datetime,
    members: Sequence[MemberObservation],
    *,
    last_progress: datetime | None,
    silent_after: timedelta,
    brief_stale_after: timedelta,
    no_progress_after: timedelta,
    repeat_window: int,
) -> list[StallSignal]:
    """The four stall signals, computed from outside (source 002 invariant 7: an agent stuck in
    a loop is the one least able to say so)."""
    signals: list[StallSignal] = []
    for m in members:
        if m.last_activity is None or now - m.last_activity > silent_after:
            signals.append(StallSignal("silent_slot", m.agent_id, "no turn or brief in time"))
        if m.last_brief is not None and now - m.last_brief > brief_stale_after:
            signals.append(StallSignal("stale_briefing", m.agent_id, "latest brief is stale"))
        recent = m.recent_fingerprints[-repeat_window:]
        if len(recent) == repeat_window and len(set(recent)) == 1:
            signals.append(
                StallSignal(
                    "repeated_fingerprint",
                    m.agent_id,
                    f"the last {repeat_window} outputs have the same content",
                )
            )
    if last_progress is None or now - last_progress > no_progress_after:
        signals.append(StallSignal("no_progress", None, "no new mail, brief or speech"))
    return signals


def may_convene(
    now: datetime, last_meeting: datetime | None, *, min_interval: timedelta, stalled: bool
) -> tuple[bool, str]:
    """The throttle of convening, which a stall bypasses: stuck right after a meeting is exactly
    when help is needed."""
    if stalled:
        return True, "stall"
    if last_meeting is not None and now - last_meeting < min_interval:
        return False, "throttled"
    return True, "due"


def pulse_conclusion(signals: Sequence[StallSignal]) -> str:
    """A stable text of a pulse's conclusion, so the log is written only when it changes."""
    if not signals:
        return "ok"
    kinds = sorted({f"{s.kind}:{s.member or '*'}" for s in signals})
    return "stalled " + " ".join(kinds)
