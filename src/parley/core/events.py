"""The append-only event log (P4): one record for every state change."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class Event(BaseModel):
    """A fact that happened: who did what to which subject, with trace ids."""

    id: str
    type: str
    time: datetime
    actor: str
    subject: str
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    # The hub process that recorded it: several may share one PostgreSQL database (P2).
    hub_id: str | None = None
