"""Live pages: server-sent events carrying HTML fragments for htmx's SSE extension.

One skeleton for every live view: subscribe to the bus first, then let the view render what it
owes the page (a backfill after the position the page was rendered at), then follow the bus. The
view turns each batch of bus items into events; a batch that arrives while the previous one
renders is drained and rendered once, so a busy hub costs a page one render per batch, not one
per event. When the viewer's token is revoked the stream sends ``signout`` and ends (the page's
``sse-close``), and the next request finds the session gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from fastapi import Request
from sse_starlette.sse import EventSourceResponse

from parley.core.errors import Unauthenticated
from parley.service.identity import TOKENS_REVOKED, revocation_topic
from parley.surfaces.web.auth import Viewer, hub_of
from parley.surfaces.web.render import fragment

SseEvent = dict[str, str]
Render = Callable[[list[dict[str, Any]] | None], Awaitable[list[SseEvent]]]
"""Called with None for the catch-up after subscribing (and after the subscription overflowed:
what it dropped is in the store), else with a batch of bus items; returns the events to send."""

SIGNED_OUT = (
    '<p class="flash" role="alert">Your session ended (the token was rotated). '
    '<a href="/ui/signin">Sign in again</a>.</p>'
)


def live(
    request: Request, viewer: Viewer, topics: Iterable[str], render: Render, *, ping_s: int = 15
) -> EventSourceResponse:
    hub = hub_of(request)
    sub = hub.bus.subscribe([*topics, revocation_topic(viewer.principal.id)])

    async def still_signed_in() -> bool:
        try:
            await hub.identity.authenticate_digest(viewer.session.token_digest)
        except Unauthenticated:
            return False
        return True

    async def events() -> AsyncIterator[SseEvent]:
        try:
            for event in await render(None):
                yield event
            while True:
                batch = [await sub.get()]
                drain = getattr(sub, "get_nowait", None)
                while drain is not None and (queued := drain()) is not None:
                    batch.append(queued)
                if any(d.get("type") == TOKENS_REVOKED for d in batch) and not (
                    await still_signed_in()
                ):
                    yield {"event": "signout", "data": SIGNED_OUT}
                    return
                overflow = any(d.get("type") == "overflow" for d in batch)
                for event in await render(None if overflow else batch):
                    yield event
        finally:
            await sub.close()

    return EventSourceResponse(events(), ping=ping_s)


def panel(
    request: Request,
    viewer: Viewer,
    topics: Iterable[str],
    event: str,
    render: Callable[[], Awaitable[str]],
    *,
    relevant: Callable[[dict[str, Any]], bool] | None = None,
) -> EventSourceResponse:
    """A panel sent again (event ``event``) on connecting — the page was rendered before the
    stream subscribed, and what changed in between must not be lost — and after each batch
    holding a ``relevant`` item (every item when None)."""

    async def on_batch(batch: list[dict[str, Any]] | None) -> list[SseEvent]:
        if batch is not None and relevant is not None and not any(map(relevant, batch)):
            return []
        return [{"event": event, "data": await render()}]

    return live(request, viewer, topics, on_batch)


def about_events(*prefixes: str) -> Callable[[dict[str, Any]], bool]:
    """A ``relevant`` for ``panel``: the bus items that are events whose type starts with one of
    ``prefixes``."""

    def relevant(item: dict[str, Any]) -> bool:
        return item.get("type") == "event" and str(item["event"].get("type", "")).startswith(
            prefixes
        )

    return relevant


class Transcript:
    """Where a live transcript stands: the seq of the last message the browser holds. A browser
    that reconnects sends Last-Event-ID (the last message's seq) and gets what it missed; a new
    stream starts at ``after``, the page's last message."""

    def __init__(self, request: Request, after: int) -> None:
        resumed = request.headers.get("last-event-id", "")
        self.seq = int(resumed) if resumed.isdigit() and len(resumed) < 12 else after

    def events(self, messages: list[dict[str, Any]]) -> list[SseEvent]:
        """A ``message`` event for each message the browser does not hold yet, in order: a
        message seen twice (a backfill that met the bus) is shown once."""
        events: list[SseEvent] = []
        for message in messages:
            if message["seq"] <= self.seq:
                continue  # already on the page
            self.seq = message["seq"]
            events.append(
                {
                    "id": str(message["seq"]),
                    "event": "message",
                    "data": fragment("_message.html", m=message),
                }
            )
        return events
