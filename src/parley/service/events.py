"""Recording and querying the event log (P4)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from parley.core.clock import as_utc
from parley.core.events import Event
from parley.core.ids import new_ulid
from parley.core.ports import Bus, Clock, Page, Tx


class EventLog:
    """Appends events inside the caller's transaction and publishes them after commit."""

    def __init__(
        self,
        clock: Clock,
        bus: Bus,
        hub_id: str | None = None,
        *,
        on_recorded: Callable[[Event], None] | None = None,
    ) -> None:
        self.clock = clock
        self.bus = bus
        self.hub_id = hub_id
        # Told of every committed event (the hub's metrics count them).
        self.on_recorded = on_recorded

    def record(
        self,
        tx: Tx,
        type: str,
        *,
        actor: str,
        subject: str,
        payload: dict[str, Any] | None = None,
        trace_id: str | None = None,
        span_id: str | None = None,
        parent_span_id: str | None = None,
    ) -> Event:
        event = Event(
            id=new_ulid(),
            type=type,
            time=self.clock.now(),
            actor=actor,
            subject=subject,
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent_span_id,
            payload=payload or {},
            hub_id=self.hub_id,
        )
        tx.insert("events", event)
        data = {"type": "event", "event": event.model_dump(mode="json")}
        self.bus.publish_on_commit(tx, "hub", data)
        if self.on_recorded is not None:
            tx.after_commit(functools.partial(self.on_recorded, event))
        return event

    async def query(
        self,
        tx: Tx,
        *,
        after: str | None = None,
        type: str | None = None,
        subject: str | None = None,
        actor: str | None = None,
        limit: int = 100,
    ) -> list[Event]:
        """Events in order, at most ``limit``: ``page`` without a byte budget."""
        page = await self.page(
            tx, max_bytes=None, after=after, type=type, subject=subject, actor=actor, limit=limit
        )
        return page.rows

    async def page(
        self,
        tx: Tx,
        *,
        max_bytes: int | None,
        after: str | None = None,
        type: str | None = None,
        subject: str | None = None,
        actor: str | None = None,
        limit: int = 100,
    ) -> Page[Event]:
        """Events in order, at most ``limit``, and no more once they hold ``max_bytes``.
        ``type`` ending in '.' matches a prefix."""
        where = _filters(tx, after=after, type=type, subject=subject, actor=actor)
        return await tx.page("events", *where, key="id", limit=limit, max_bytes=max_bytes)

    async def latest(
        self,
        tx: Tx,
        *,
        type: str | None = None,
        subject: str | None = None,
        actor: str | None = None,
        before: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[Event]:
        """The newest events first, at most ``limit``, filtered as ``page`` filters them; only
        those older than the event ``before`` and not older than ``since`` when given."""
        e = tx.table("events").c
        where = _filters(tx, after=None, type=type, subject=subject, actor=actor)
        if before:
            where.append(e.id < before)
        if since is not None:
            where.append(e.time >= as_utc(since))
        rows: list[Event] = await tx.select("events", *where, order_by=[e.id.desc()], limit=limit)
        return rows


def _filters(
    tx: Tx, *, after: str | None, type: str | None, subject: str | None, actor: str | None
) -> list[Any]:
    """The conditions on the events table for the filters given; ``type`` ending in '.'
    matches a prefix, and an empty filter matches everything."""
    e = tx.table("events").c
    where: list[Any] = []
    if after:
        where.append(e.id > after)
    if type:
        where.append(e.type.startswith(type) if type.endswith(".") else e.type == type)
    if subject:
        where.append(e.subject == subject)
    if actor:
        where.append(e.actor == actor)
    return where
