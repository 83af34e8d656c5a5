"""Channels, their messages, the sessions that speak in them, and discussion tasks (SPEC C1–C15).

A *task* is one run of speaking turns triggered by a message: the wake of an agent in its work
channel (one member, one round), a group discussion (C5) or the rounds of a discussion channel
(C3–C9). Every task records why it ended, so "the discussion ended" is never shown as "the
conclusion was verified" (C7).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, Field

from parley.core.errors import Conflict

ChannelKind = Literal["work", "group", "discussion", "meeting", "direct"]
CHANNEL_KINDS: tuple[str, ...] = get_args(ChannelKind)
# The kinds a principal creates through the channel routes, which count against its limit of
# open channels; work and meeting channels come with an agent and a meeting.
CREATED_KINDS: tuple[ChannelKind, ...] = ("group", "direct", "discussion")
ChannelStatus = Literal["active", "closed", "deleted"]
SenderKind = Literal["agent", "human", "moderator", "system"]
MissedTurnPolicy = Literal["fail", "no_reply"]

TaskStatus = Literal["running", "finished"]
TaskMode = Literal["wake", "group", "discussion"]
EndReason = Literal[
    "unanimous",
    "max_rounds",
    "dormant",
    "idle",
    "superseded",
    "cancelled",
    "failed",
    "closed",
    "replied",
    "interrupted",
    "deleted",
]
END_REASONS: tuple[str, ...] = get_args(EndReason)
# Why a reply was refused (C10). A failing call is not a refused reply: it is recorded with
# outcome ``failed`` and the runtime's own code, and ends the task failed (C11).
RejectReason = Literal["new_message", "room_deleted", "cancelled", "publish_failed"]
REJECT_REASONS: tuple[str, ...] = get_args(RejectReason)
InvocationOutcome = Literal["accepted", "silent", "rejected", "failed"]

MAX_MEMBERS = 64
MAX_ROUTE_CHARS = 300
TRANSCRIPT_WINDOW = 128
DEFAULT_ROUNDS = 3


class Channel(BaseModel):
    """A place where members exchange append-only messages."""

    id: str
    name: str
    kind: ChannelKind
    private: bool = False
    created_by: str
    created: datetime
    status: ChannelStatus = "active"
    discussion_rounds: int = DEFAULT_ROUNDS
    turn_timeout_s: float = 120.0
    missed_turn_policy: MissedTurnPolicy = "fail"
    owner_agent_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    members: list[str] = Field(default_factory=list)
    last_seq: int = 0
    last_trigger_id: str | None = None
    last_activity: datetime | None = None


class ChannelMessage(BaseModel):
    """One message in a channel (C1); ids are ULIDs, ``seq`` orders them within the channel."""

    id: str
    channel_id: str
    seq: int
    sender_id: str
    sender_kind: SenderKind
    content: str
    reply_to: str | None = None
    trigger_id: str | None = None
    task_id: str | None = None
    round: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created: datetime


class LogicalSession(BaseModel):
    """An agent's conversation in one channel (W1). The work-channel session is the main one."""

    id: str
    agent_id: str
    channel_id: str
    display_name: str
    runtime_state: dict[str, Any] = Field(default_factory=dict)
    model_override: str | None = None
    created: datetime
    # A child session (W3) points back at its parent's session and the worker that spawned it.
    parent_logical_id: str | None = None
    spawned_by_worker_id: str | None = None
    spawn_purpose: str | None = None


class Task(BaseModel):
    """One run of speaking turns, with the snapshot it runs with (C12)."""

    id: str
    channel_id: str
    trigger_id: str
    mode: TaskMode
    status: TaskStatus = "running"
    end_reason: EndReason | None = None
    members: list[str]
    rounds: int
    current_round: int = 0
    calls: int = 0
    accepted: int = 0
    failed_member: str | None = None
    error: str | None = None
    cancel_requested: bool = False
    # The hub driving the task and until when it holds it unless it renews (P2).
    owner: str | None = None
    lease_until: datetime | None = None
    created: datetime
    finished: datetime | None = None


def _cut_route(route: str) -> str:
    # A route is built from the agent's runtime config (base URL, model); one too long for the
    # trace column must not cost the trace, let alone the task. Its start names the provider.
    return route if len(route) <= MAX_ROUTE_CHARS else route[: MAX_ROUTE_CHARS - 1] + "…"


class Invocation(BaseModel):
    """The trace record of one runtime call (C13)."""

    id: str
    task_id: str | None
    channel_id: str
    trigger_id: str | None
    round: int | None
    agent_id: str
    prompt_first_id: str | None
    prompt_last_id: str | None
    prompt_chars: int
    model_route: Annotated[str, AfterValidator(_cut_route)]
    outcome: InvocationOutcome
    reason: str | None = None
    message_id: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    created: datetime


class PendingTurn(BaseModel):
    """A turn offered to a remote agent, answered through ``speak`` / ``no_reply``."""

    id: str
    agent_id: str
    channel_id: str
    task_id: str | None
    round: int | None
    prompt: dict[str, Any]
    deadline: datetime
    status: Literal["pending", "answered", "expired", "superseded", "cancelled"] = "pending"
    answer: str | None = None
    created: datetime


def refuse_meeting_channel(channel: Channel, action: str) -> None:
    """A meeting's channel is its transcript, written only by the meeting: speeches when the
    moderator gives the floor, a human's interjection through the meeting, the moderator's and
    the system's notes. Through a channel route a member's post would start turns outside the
    moderator, the round cap and the speech limit, and a changed member list would change who
    attends."""
    if channel.kind != "meeting":
        return
    meeting_id = channel.metadata.get("meeting_id", "")
    raise Conflict(
        f"channel {channel.id!r} is the transcript of meeting {meeting_id!r}, written only by "
        f"the meeting, and cannot {action}; use the meeting's routes: a human speaks into a "
        f"running meeting with `parley room post {meeting_id}` (REST: POST "
        f"/v1/rooms/meetings/{meeting_id}/messages), and members "
        "speak when the moderator gives them the floor",
        code="meeting_channel",
        meeting_id=meeting_id,
    )
