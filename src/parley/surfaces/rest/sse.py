"""Server-sent event streams, resumable with Last-Event-ID.

Subscribe first, then backfill from the store, then follow the bus: an event published between
the backfill query and the first live read is seen twice at worst (and dropped by id), never
missed. Ids are the stream's own order (inbox or channel ``seq``, event ULID).

The backfill comes a page at a time (at most ``PAGE_ROWS`` rows and the hub's page budget in
bytes), the next page read only once the previous one has been handed to the client: a stream of
a big inbox holds one page, not the inbox.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from sse_starlette.sse import EventSourceResponse

from parley.core.limits import MAX_SEQ
from parley.core.ports import Bus

PAGE_ROWS = 200


@dataclass(frozen=True)
class SseItem:
    id: str
    event: str
    data: dict[str, Any]


@dataclass(frozen=True)
class BackfillPage:
    """Items after a position, and whether the store holds more after them."""

    items: list[SseItem]
    more: bool


Backfill = Callable[[str | None], Awaitable[BackfillPage]]
FromLive = Callable[[dict[str, Any]], SseItem | None]
Sortable = Callable[[str], Any]


def last_event_id(request: Request, query_value: str | None) -> str | None:
    return request.headers.get("last-event-id") or query_value


def seq_position(event_id: str | None) -> str | None:
    """The Last-Event-ID of a seq-ordered stream if it names a position a store can hold, else
    None, which replays the stream from its start."""
    # The length check first: int() refuses thousands of digits with an error of its own.
    if event_id is None or not (event_id.isascii() and event_id.isdigit() and len(event_id) <= 10):
        return None
    return event_id if int(event_id) <= MAX_SEQ else None


def stream(
    request: Request,
    bus: Bus,
    topics: Iterable[str],
    *,
    after: str | None,
    backfill: Backfill,
    from_live: FromLive,
    order: Sortable,
    on_sent: Callable[[list[SseItem]], Awaitable[None]] | None = None,
    allow_equal: Callable[[SseItem], bool] | None = None,
    until: Callable[[SseItem], bool] | None = None,
    ping_s: int = 15,
) -> EventSourceResponse:
    """Stream backfill then live items, skipping any at or before the last id sent (items for
    which ``allow_equal`` is true may share the last id, e.g. status updates). The stream ends
    after an item for which ``until`` is true (e.g. the last state of something that ended)."""
    sub = bus.subscribe(topics)
    subscribers = request.app.state.hub.ctx.metrics.sse_subscribers

    async def events() -> AsyncIterator[dict[str, str]]:
        last = after
        subscribers.inc()
        try:
            refill = True
            while True:
                if refill:
                    page = await backfill(last)
                    pending, more = page.items, page.more
                sent: list[SseItem] = []
                for item in pending:
                    if last is not None:
                        if order(item.id) < order(last):
                            continue
                        if order(item.id) == order(last) and not (
                            allow_equal is not None and allow_equal(item)
                        ):
                            continue
                    last = item.id
                    sent.append(item)
                    yield {"id": item.id, "event": item.event, "data": json.dumps(item.data)}
                    if until is not None and until(item):
                        return
                if sent and on_sent is not None:
                    await on_sent(sent)
                # The next page only now that this one is out; live events wait in the
                # subscription meanwhile.
                refill = more and bool(sent)
                if refill:
                    continue
                batch = [await sub.get()]
                drain = getattr(sub, "get_nowait", None)
                while drain is not None and (queued := drain()) is not None:
                    batch.append(queued)
                # The subscription overflowed: what it dropped is in the store, read from here.
                refill = any(d.get("type") == "overflow" for d in batch)
                if not refill:
                    pending = [it for it in (from_live(d) for d in batch) if it is not None]
                    more = False
        finally:
            subscribers.dec()
            await sub.close()

    return EventSourceResponse(events(), ping=ping_s)
