"""Core records as table rows and back: the tables whose rows map one-to-one onto a core model."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import DateTime, Table

from parley.adapters.store import schema as s
from parley.core.bridge import BridgeLink, BridgePlace, BridgeRelay, LinkCode
from parley.core.channels import (
    Channel,
    ChannelMessage,
    Invocation,
    LogicalSession,
    PendingTurn,
    Task,
)
from parley.core.consent import Invitation
from parley.core.events import Event
from parley.core.identity import Principal
from parley.core.mail import Message
from parley.core.processes import RuntimeProcess
from parley.core.rooms import Brief, Meeting, Minutes, PulseEntry, Room, RoomMember, Speech
from parley.core.usage import Budget, UsageRecord
from parley.core.workers import Artifact, Worker

RECORDS: dict[str, tuple[Table, type[BaseModel]]] = {
    "principals": (s.principals, Principal),
    "events": (s.events, Event),
    "messages": (s.messages, Message),
    "channels": (s.channels, Channel),
    "channel_messages": (s.channel_messages, ChannelMessage),
    "sessions": (s.sessions, LogicalSession),
    "tasks": (s.tasks, Task),
    "invocations": (s.invocations, Invocation),
    "pending_turns": (s.pending_turns, PendingTurn),
    "invitations": (s.invitations, Invitation),
    "rooms": (s.rooms, Room),
    "room_members": (s.room_members, RoomMember),
    "meetings": (s.meetings, Meeting),
    "speeches": (s.speeches, Speech),
    "minutes": (s.minutes, Minutes),
    "briefs": (s.briefs, Brief),
    "pulse_log": (s.pulse_log, PulseEntry),
    "workers": (s.workers, Worker),
    "worker_artifacts": (s.worker_artifacts, Artifact),
    "bridge_places": (s.bridge_places, BridgePlace),
    "bridge_relays": (s.bridge_relays, BridgeRelay),
    "bridge_links": (s.bridge_links, BridgeLink),
    "bridge_link_codes": (s.bridge_link_codes, LinkCode),
    "turn_usage": (s.turn_usage, UsageRecord),
    "usage_budgets": (s.usage_budgets, Budget),
    "runtime_processes": (s.runtime_processes, RuntimeProcess),
}
# Each record's table by name.
RECORD_TABLES = {name: table for name, (table, _) in RECORDS.items()}
_COLUMNS = {name: frozenset(table.columns.keys()) for name, (table, _) in RECORDS.items()}
_TS_COLUMNS = {
    name: {c.name for c in table.columns if isinstance(c.type, DateTime)}
    for name, (table, _) in RECORDS.items()
}


def utc(value: Any) -> Any:
    """A timestamp read back with its time zone (SQLite keeps the UTC wall clock only)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def row_to(name: str, row: Mapping[str, Any]) -> Any:
    """The core record of a row of table ``name``."""
    _table, model = RECORDS[name]
    data = dict(row)
    for col in _TS_COLUMNS[name]:
        if col in data:
            data[col] = utc(data[col])
    if name == "channels":
        data.setdefault("members", [])
    return model.model_validate(data)


def to_row(name: str, record: BaseModel) -> dict[str, Any]:
    """The row of table ``name`` that stores ``record``."""
    data = record.model_dump()
    cols = _COLUMNS[name]
    row = {k: v for k, v in data.items() if k in cols}
    if name == "messages":
        msg: Message = record  # type: ignore[assignment]
        row["expires_at"] = msg.expires_at
    return row
