"""Meeting rooms' records (R1–R10): rooms, their members, meetings, speeches, minutes, briefs and
the pulse log. The rules that move them live in ``core/meetings.py``; these are the shapes the
store keeps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

# A member's activity is a fact the hub observes (a turn in flight, a turn ended, marked done);
# the meeting states are where a summons has put it.
ActivityState = Literal["working", "idle-waiting", "done"]
MeetingState = Literal["awaiting-entry", "in-meeting"]
MEETING_STATES: tuple[str, ...] = get_args(MeetingState)
MemberState = Literal["working", "idle-waiting", "done", "awaiting-entry", "in-meeting"]

# When a working member enters: at the end of its turn in flight (default), or at once, its
# turn going on beside the meeting.
EntryBoundary = Literal["turn_end", "immediate"]

MeetingStatus = Literal["running", "ended"]
MeetingEndReason = Literal["adjourned", "round_cap", "stopped", "interrupted", "failed"]

# What happened to one attendee of a meeting.
Attendance = Literal["present", "awaiting", "absent"]
SpeechOutcome = Literal["accepted", "over_limit", "failed"]
# Accepted minutes are stored at once and delivered when the meeting closes.
MinutesStatus = Literal["accepted", "delivered", "failed"]

DEFAULT_SPEECH_TARGET = 800
DEFAULT_SPEECH_LIMIT = 1600
DEFAULT_MAX_ROUNDS = 3
DEFAULT_MINUTES_LIMIT = 1200
DEFAULT_PROJECTION_CHARS = 2000


class RoomConfig(BaseModel):
    """The per-room settings of its meetings."""

    entry_boundary: EntryBoundary = "turn_end"
    speech_target: int = Field(default=DEFAULT_SPEECH_TARGET, ge=50, le=20_000)
    speech_limit: int = Field(default=DEFAULT_SPEECH_LIMIT, ge=100, le=40_000)
    max_rounds: int = Field(default=DEFAULT_MAX_ROUNDS, ge=1, le=20)
    minutes_limit: int = Field(default=DEFAULT_MINUTES_LIMIT, ge=100, le=20_000)
    projection_chars: int = Field(default=DEFAULT_PROJECTION_CHARS, ge=0, le=20_000)
    # The moderator's runtime when a human convenes (a human has no model of its own); the
    # default has none, so such meetings are moderated by safe rotation.
    moderator_runtime: dict[str, Any] = Field(default_factory=lambda: {"kind": "none"})
    # Light path (R10): the stall detector's thresholds and the throttle of meetings.
    silent_after_s: float = Field(default=3600.0, gt=0)
    brief_stale_after_s: float = Field(default=4 * 3600.0, gt=0)
    no_progress_after_s: float = Field(default=2 * 3600.0, gt=0)
    repeat_window: int = Field(default=3, ge=2, le=20)
    min_meeting_interval_s: float = Field(default=3600.0, ge=0)
    briefs_kept: int = Field(default=5, ge=1, le=100)
    brief_max_chars: int = Field(default=1000, ge=50, le=10_000)


class Room(BaseModel):
    """A persistent meeting room (R1)."""

    id: str
    name: str
    created_by: str
    created: datetime
    config: RoomConfig = Field(default_factory=RoomConfig)


class RoomMember(BaseModel):
    """An agent in a room, represented by its work-channel session. ``state`` is the last state
    the hub recorded; ``state_before`` is the state a summons found, restored on dismissal. Its
    ``id`` is the agent's: an agent belongs to at most one room."""

    id: str
    agent_id: str
    room_id: str
    session_id: str
    workspace: str | None = None
    state: MemberState = "idle-waiting"
    state_before: MemberState | None = None
    meeting_id: str | None = None
    joined: datetime
    last_activity: datetime | None = None


class Attendee(BaseModel):
    """One summoned member of a meeting and what became of the summons."""

    agent_id: str
    before: ActivityState
    attendance: Attendance
    entered_round: int | None = None


class Meeting(BaseModel):
    """One meeting of a room; its transcript is the messages of its ``meeting`` channel."""

    id: str
    room_id: str
    channel_id: str
    topic: str
    convened_by: str
    moderator_route: str = ""
    status: MeetingStatus = "running"
    end_reason: MeetingEndReason | None = None
    error: str | None = None
    round: int = 0
    max_rounds: int = DEFAULT_MAX_ROUNDS
    # Accepted speeches, and turns given (a failed speech is a turn too): rounds and the round
    # cap count turns, or a meeting whose every speech fails would never reach its cap.
    speeches: int = 0
    turns: int = 0
    attendees: list[Attendee] = Field(default_factory=list)
    stop_requested: bool = False
    owner: str | None = None
    created: datetime
    ended: datetime | None = None


class Speech(BaseModel):
    """One attempt of a member to speak, accepted or not (R5): committed when spoken."""

    id: str
    meeting_id: str
    agent_id: str
    round: int
    attempt: int
    outcome: SpeechOutcome
    chars: int
    runtime: str
    model_route: str
    message_id: str | None = None
    reason: str | None = None
    created: datetime
    # How long the speech waited on its runtime (``provider_wait_ms``) and took to commit
    # (``persist_ms``); None for speeches recorded before the hub timed them.
    timings: dict[str, float] | None = None


class Minutes(BaseModel):
    """One member's own minutes of a meeting, written by its own runtime (R8, R11)."""

    id: str
    meeting_id: str
    agent_id: str
    status: MinutesStatus
    text: str
    runtime: str
    model_route: str
    attempts: int
    reason: str | None = None
    mail_id: str | None = None
    created: datetime


class Brief(BaseModel):
    """A bounded periodic brief a member posts to its room's board (R10)."""

    id: str
    room_id: str
    agent_id: str
    text: str
    fingerprint: str
    created: datetime


class PulseEntry(BaseModel):
    """A change of a room's pulse conclusion (written only when the conclusion changes)."""

    id: str
    room_id: str
    conclusion: str
    escalated: bool
    reason: str
    signals: list[dict[str, Any]] = Field(default_factory=list)
    meeting_id: str | None = None
    created: datetime
