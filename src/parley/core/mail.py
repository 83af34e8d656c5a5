"""Durable mail between agents (SPEC M1–M8): the message record, its kinds and its lifecycle.

A message row is one inbox entry. Fan-out (cc, broadcast, channel members, the operator's copy of
a blocker) creates one row per recipient, each with ``copy_of`` pointing at the primary row, so
that every recipient moves its own copy through the lifecycle independently.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from parley.core.errors import Conflict, InvalidRequest, UnknownKind
from parley.core.limits import (
    MAX_SEQ,
    OptionalStorableText,
    StorableObject,
    StorableText,
    check_size,
    json_bytes,
)
from parley.core.mail_kinds import DEFAULT_TTL_SECONDS as DEFAULT_TTL_SECONDS
from parley.core.mail_kinds import MAIL_KINDS as MAIL_KINDS
from parley.core.mail_kinds import MailKind as MailKind
from parley.core.mail_kinds import MailroomKind as MailroomKind
from parley.core.mail_kinds import SessionKind as SessionKind

MailStatus = Literal["pending", "delivered", "read", "in_progress", "closed", "expired", "failed"]
MAIL_STATUSES: tuple[str, ...] = get_args(MailStatus)
FromKind = Literal["agent", "human", "system", "external"]
ToKind = Literal["agent", "session", "channel", "broadcast"]
CopyReason = Literal["cc", "blocker", "broadcast", "channel", "redeliver"]

MAX_TTL_SECONDS = 365 * 86400
BROADCAST_TO = "*"

# The forward order of the lifecycle; a recipient may only move a message to a later step.
_FORWARD: dict[str, int] = {
    "pending": 0,
    "delivered": 1,
    "read": 2,
    "in_progress": 3,
    "closed": 4,
}
RECIPIENT_STATUSES = ("read", "in_progress", "closed")
OPEN_STATUSES = ("pending", "delivered", "read", "in_progress")


class Message(BaseModel):
    """One inbox entry (M1)."""

    id: str
    created: datetime
    ttl_seconds: int = DEFAULT_TTL_SECONDS
    from_kind: FromKind
    from_id: str
    to_kind: ToKind
    to_id: str
    recipient_id: str
    cc: list[str] = Field(default_factory=list)
    kind: MailKind
    subject: str = ""
    body: str = ""
    payload: dict[str, Any] = Field(default_factory=dict)
    parent_message_id: str | None = None
    correlation_id: str | None = None
    related: list[str] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    status: MailStatus = "pending"
    delivered_at: datetime | None = None
    read_at: datetime | None = None
    consumed_at: datetime | None = None
    closed_at: datetime | None = None
    failure_reason: str | None = None
    idempotency_key: str | None = None
    archive_label: str | None = None
    copy_of: str | None = None
    copy_reason: CopyReason | None = None
    seq: int = 0

    @property
    def expires_at(self) -> datetime:
        return self.created + timedelta(seconds=self.ttl_seconds)

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES


class SendRequest(BaseModel):
    """What a sender asks for; the hub fills in the sender, ids and times."""

    to: StorableText = Field(
        max_length=200,
        description="Recipient: an agent id, 'session:<id>', 'channel:<id>', or '*'.",
    )
    kind: str = Field(max_length=32)
    subject: StorableText = Field(default="", max_length=500)
    # Body and payload are bounded in bytes by the hub's settings (``check_size``), not here.
    body: StorableText = Field(default="", description="Markdown; see the hub's message limit.")
    payload: StorableObject = Field(
        default_factory=dict, description="JSON for programs; see the hub's payload limit."
    )
    cc: list[StorableText] = Field(default_factory=list, max_length=64)
    parent_message_id: OptionalStorableText = Field(default=None, max_length=64)
    # The correlation id is also the trace id of the send's event, whose column holds 64.
    correlation_id: OptionalStorableText = Field(default=None, max_length=64)
    related: list[StorableText] = Field(default_factory=list, max_length=100)
    labels: list[StorableText] = Field(default_factory=list, max_length=50)
    ttl_seconds: int = Field(default=DEFAULT_TTL_SECONDS, ge=1, le=MAX_TTL_SECONDS)
    idempotency_key: OptionalStorableText = Field(default=None, min_length=1, max_length=200)

    def checked_size(self, *, payload_max: int, message_max: int) -> int:
        """Refuse a payload or a whole message over the limits (bytes of compact JSON); returns
        the size of one stored copy."""
        check_size(json_bytes(self.payload), payload_max, "the payload", code="payload_too_large")
        return check_size(
            json_bytes(self),
            message_max,
            "the message (subject, body, payload, labels…)",
            code="message_too_large",
        )


def check_kind(kind: str) -> MailKind:
    """Refuse a kind parley does not know (M2)."""
    if kind not in MAIL_KINDS:
        raise UnknownKind(
            f"mail kind {kind!r} is unknown; use one of {', '.join(MAIL_KINDS)}",
            kind=kind,
            allowed=list(MAIL_KINDS),
        )
    return kind  # type: ignore[return-value]


def check_status_filter(statuses: list[str] | None) -> None:
    """Refuse a status filter parley does not know: it would match nothing, and an empty
    answer would read as "no such mail"."""
    for status in statuses or ():
        if status not in MAIL_STATUSES:
            raise InvalidRequest(
                f"mail status {status!r} is unknown; filter by one of {', '.join(MAIL_STATUSES)}",
                code="invalid_status",
                allowed=list(MAIL_STATUSES),
            )


def check_since(since: str | None) -> str | None:
    """Normalise an inbox ``since`` filter to ISO-8601 UTC; refuse text that is not a time."""
    if since is None:
        return None
    try:
        at = datetime.fromisoformat(since.strip().replace("Z", "+00:00"))
        # The hub is UTC: a time without an offset is taken as UTC. Converting a time at the
        # edge of the calendar (year 1 or 9999 with an offset) overflows.
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidRequest(
            f"since {since!r} is not a time; use ISO-8601 such as 2026-05-31T15:00:00Z",
            code="invalid_since",
        ) from None
    return at.isoformat()


def parse_address(to: str) -> tuple[ToKind, str]:
    """Split a recipient address into its kind and id."""
    to = to.strip()
    if to in (BROADCAST_TO, "all"):
        return "broadcast", BROADCAST_TO
    for prefix in ("session:", "channel:", "agent:"):
        if to.startswith(prefix):
            target = to[len(prefix) :]
            if not target:
                break
            return prefix[:-1], target  # type: ignore[return-value]
    if not to or ":" in to:
        raise InvalidRequest(
            f"recipient {to!r} is not an address; use an agent id, 'session:<id>', "
            "'channel:<id>' or '*'",
            code="invalid_recipient",
        )
    return "agent", to


def check_transition(current: str, target: str) -> None:
    """A recipient may only move its own mail forward (M3)."""
    if target not in RECIPIENT_STATUSES:
        raise InvalidRequest(
            f"status {target!r} cannot be set by a recipient; use one of "
            f"{', '.join(RECIPIENT_STATUSES)}",
            code="invalid_status",
        )
    if current not in _FORWARD:
        raise Conflict(
            f"message is {current!r}; it can no longer change", code="message_final", status=current
        )
    if current == target == "closed":
        raise Conflict(
            "message is already closed, which archived it: closing and archiving are one step "
            "(the operator can redeliver it as a new pending copy)",
            code="backward_transition",
            status=current,
            target=target,
        )
    if _FORWARD[target] <= _FORWARD[current]:
        raise Conflict(
            f"message is already {current!r}; mail only moves forward "
            "(pending → delivered → read → in_progress → closed)",
            code="backward_transition",
            status=current,
            target=target,
        )


class MailSummary(BaseModel):
    """Per-agent summary (M8)."""

    agent_id: str
    unread: int
    in_progress: int
    oldest_pending_age_s: float | None
    open_blockers: int
    total_open: int


class InboxFilter(BaseModel):
    status: list[str] | None = None
    kind: str | None = None
    from_id: str | None = None
    label: str | None = None
    unread: bool = False
    include_archived: bool = False
    since: str | None = None
    after_seq: int | None = Field(default=None, ge=0, le=MAX_SEQ)
    limit: int = Field(default=100, ge=1, le=1000)
