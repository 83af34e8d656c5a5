"""Server-sent event streams, resumable with Last-Event-ID.

Subscribe first, then backfill from the store, then follow the bus: an event published between
the backfill query and the first live read is seen twice at worst (and dropped by id), never
missed. Ids are the stream's own order (inbox or channel ``seq``, event ULID).

The backfill comes a page at a time (at most ``PAGE_ROWS`` rows and the hub's page budget in
bytes), the next page read only once the previous one has been handed to the client: a stream of
a big inbox holds one page, not the inbox.

A stream of something whose readers can change (a channel) is given ``recheck``: when the bus
says who may read it changed (``ACCESS_CHANGED``), the stream asks again whether its caller may,
and if not it ends with a last ``error`` event carrying the refusal (``channel_forbidden``,
``channel_not_found``); nothing published after the change reaches it.

Every stream also follows its caller's token revocations in its own subscription. The request
guard ends a stream whose token was revoked too, but from a subscription of its own, which may
be heard after this one; here a revocation and what was published after it arrive in the order
they were committed, so nothing published after a revocation reaches the revoked token.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from sse_starlette.sse import EventSourceResponse

from parley.core.errors import CallerError
from parley.core.identity import Principal
from parley.core.limits import MAX_SEQ
from parley.core.ports import Bus
from parley.service.conversations.transcripts import ACCESS_CHANGED
from parley.service.hub import Hub
from parley.service.identity import TOKENS_REVOKED, revocation_topic, token_revoked
from parley.surfaces.rest.deps import CALLER, CALLER_TOKEN

PAGE_ROWS = 200
# Live ids a ``late_ids`` stream remembers to drop repeats: far more than can commit out of order
# in the moment between a backfill and the first live event.
LATE_MEMORY = 4096


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


class _Position:
    """Where a stream stands: which items it has sent, so that none is sent twice."""

    def __init__(
        self,
        after: str | None,
        order: Sortable,
        allow_equal: Callable[[SseItem], bool] | None,
        late_ids: bool,
    ) -> None:
        self.last = after
        self.order = order
        self.allow_equal = allow_equal
        self.recent: deque[str] | None = deque(maxlen=LATE_MEMORY) if late_ids else None

    def admit(self, item: SseItem, *, live: bool) -> bool:
        """Whether to send ``item`` (and note it sent)."""
        order, last = self.order, self.last
        if self.recent is not None and live:
            if item.id in self.recent:
                return False
        elif last is not None:
            if order(item.id) < order(last):
                return False
            if order(item.id) == order(last) and not (
                self.allow_equal is not None and self.allow_equal(item)
            ):
                return False
        if last is None or order(item.id) > order(last):
            self.last = item.id
        if self.recent is not None:
            self.recent.append(item.id)
        return True


async def _refusal_after(
    batch: list[dict[str, Any]],
    hub: Hub,
    caller: Principal | None,
    token: str | None,
    recheck: Callable[[], Awaitable[object]] | None,
) -> CallerError | None:
    """Why a stream must end after ``batch``, if it must: its caller's token was revoked (or
    cannot be confirmed, which counts as revoked), or the caller may no longer read what it
    streams. After an overflow both are asked: the change may be among what was dropped."""
    kinds = {d.get("type") for d in batch}
    if caller is not None and token is not None and kinds & {TOKENS_REVOKED, "overflow"}:
        try:
            await hub.identity.authenticate(token)
        except Exception:
            return token_revoked(caller.id)
    if recheck is not None and kinds & {ACCESS_CHANGED, "overflow"}:
        try:
            await recheck()
        except CallerError as exc:
            return exc
    return None


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
    late_ids: bool = False,
    recheck: Callable[[], Awaitable[object]] | None = None,
    ping_s: int = 15,
) -> EventSourceResponse:
    """Stream backfill then live items, skipping any at or before the last id sent (items for
    which ``allow_equal`` is true may share the last id, e.g. status updates). The stream ends
    after an item for which ``until`` is true (e.g. the last state of something that ended).

    ``late_ids``: ids are unique but not in commit order (event ULIDs made by several hubs
    sharing one database: an event made first may commit last). A live item is then skipped
    only if it was already sent, remembered for the last ``LATE_MEMORY`` items."""
    hub: Hub = request.app.state.hub
    caller: Principal | None = getattr(request.state, CALLER, None)
    token: str | None = getattr(request.state, CALLER_TOKEN, None)
    topics = list(topics)
    if caller is not None and token is not None:
        topics.append(revocation_topic(caller.id))
    sub = bus.subscribe(topics)
    subscribers = hub.ctx.metrics.sse_subscribers

    async def events() -> AsyncIterator[dict[str, str]]:
        pos = _Position(after, order, allow_equal, late_ids)
        live = False
        subscribers.inc()
        try:
            refill = True
            while True:
                if refill:
                    page = await backfill(pos.last)
                    pending, more = page.items, page.more
                    live = False
                sent: list[SseItem] = []
                for item in pending:
                    if not pos.admit(item, live=live):
                        continue
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
                refused = await _refusal_after(batch, hub, caller, token, recheck)
                if refused is not None:
                    yield {"event": "error", "data": json.dumps(refused.to_dict())}
                    return
                # The subscription overflowed: what it dropped is in the store, read from here.
                refill = any(d.get("type") == "overflow" for d in batch)
                if not refill:
                    pending = [it for it in (from_live(d) for d in batch) if it is not None]
                    more = False
                    live = True
        finally:
            subscribers.dec()
            await sub.close()

    return EventSourceResponse(events(), ping=ping_s)
