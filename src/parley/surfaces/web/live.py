"""Live pages: server-sent events carrying HTML fragments that the page swaps in (``parley.js``;
a browser's pages receive them over one shared stream, ``shared.py``).

One skeleton for every live view. A view describes what its page shows live: panels (each sent
again, whole, when something it shows changed) and at most one transcript (new messages appended,
resumable with Last-Event-ID). The stream joins the shared feeds of those (``feeds.py``: one
render for every stream that shows the same thing to the same viewer, bursts coalesced), then
reads, as the viewer, the messages the page does not hold yet, then sends what the feeds hand it.

A session holds a bounded number of streams (one more is refused 429 ``live_streams_exceeded``
before the response starts; the page keeps what it loaded and says it is not live). A stream ends
with a last ``ended`` event (the page's ``sse-close``) when its session ends — signed out,
replaced, evicted, expired, its token revoked — or when its viewer may no longer see what it
shows (removed from the channel, the channel deleted).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from fastapi import Request
from sse_starlette.sse import EventSourceResponse

from parley.core.errors import CallerError, RateLimited
from parley.surfaces.web.auth import Viewer, sessions_of
from parley.surfaces.web.feeds import (
    ENDED,
    SESSION_ENDED,
    LiveStreams,
    Panel,
    SseEvent,
    Stream,
    Transcript,
    message_html,
    notice,
    refused,
)
from parley.surfaces.web.sessions import WebSessions

__all__ = ["Panel", "Position", "Transcript", "about_events", "live", "streams_of"]


def streams_of(request: Request) -> LiveStreams:
    found: LiveStreams = request.app.state.web_live
    return found


def about_events(*prefixes: str) -> Callable[[dict[str, Any]], bool]:
    """A panel's ``relevant``: the bus items that are events whose type starts with one of
    ``prefixes``."""

    def relevant(item: dict[str, Any]) -> bool:
        return item.get("type") == "event" and str(item["event"].get("type", "")).startswith(
            prefixes
        )

    return relevant


class Position:
    """Where a live transcript stands: the seq of the last message the browser holds. A browser
    that reconnects sends Last-Event-ID (the last message's seq) and gets what it missed; a new
    stream starts at ``after``, the page's last message."""

    def __init__(self, request: Request, after: int) -> None:
        resumed = request.headers.get("last-event-id", "")
        self.seq = int(resumed) if resumed.isdigit() and len(resumed) < 12 else after

    def event(self, seq: int, html: str) -> SseEvent | None:
        """The ``message`` event of a message the browser does not hold yet, else None: a
        message seen twice (a backfill that met the bus) is shown once."""
        if seq <= self.seq:
            return None  # already on the page
        self.seq = seq
        return {"id": str(seq), "event": "message", "data": html}


class _Sender:
    """What one stream sends next: the messages its browser misses (read from the store when
    it fell behind), the new ones, and the panels that changed."""

    def __init__(self, stream: Stream, position: Position, transcript: Transcript | None) -> None:
        self.stream = stream
        self.position = position
        self.transcript = transcript

    async def wait(self, sessions: WebSessions) -> None:
        """Until the stream has something to send; it is ended when its session expires."""
        stream, session = self.stream, self.stream.viewer.session
        while not stream.wake.is_set():
            try:
                async with asyncio.timeout(max(sessions.remaining(session), 0)):
                    await stream.wake.wait()
            except TimeoutError:
                if not sessions.alive(session):  # expired (every stream of it ends) or gone
                    stream.end(SESSION_ENDED["expired"])
        stream.wake.clear()

    async def pending(self) -> list[SseEvent]:
        events: list[SseEvent] = []
        stream = self.stream
        if stream.behind and self.transcript is not None:
            stream.behind = False
            try:
                rows = await self.transcript.backfill(self.position.seq)
            except CallerError as exc:
                stream.end(refused(exc))  # the viewer may no longer read the transcript
                return []
            messages = [(int(m["seq"]), message_html(m)) for m in rows]
            events += self._messages(messages)
        events += self._messages(stream.take_items())
        events += stream.take_panels()
        return events

    def _messages(self, messages: list[tuple[int, str]]) -> list[SseEvent]:
        return [e for seq, html in messages if (e := self.position.event(seq, html)) is not None]


def live(
    request: Request,
    viewer: Viewer,
    *,
    panels: Iterable[Panel] = (),
    transcript: Transcript | None = None,
    after: int = 0,
    ping_s: int = 15,
) -> EventSourceResponse:
    """The live stream of a page: ``panels`` again whenever they change and, with
    ``transcript``, each message after ``after`` (or Last-Event-ID)."""
    streams = streams_of(request)
    sessions = sessions_of(request)
    streams.check(viewer)  # refused before the response starts: 429 with its code
    position = Position(request, after)
    shown = list(panels)

    async def events() -> AsyncIterator[SseEvent]:
        stream = Stream(viewer)
        try:
            streams.enter(stream)
        except RateLimited as exc:  # others opened meanwhile
            yield {"event": ENDED, "data": notice(f"{exc.message} ({exc.code}).")}
            return
        sender = _Sender(stream, position, transcript)
        try:
            # Join first, then read the store: a message appended in between is seen twice at
            # worst (and shown once), never missed.
            for panel in shown:
                streams.join_panel(stream, panel)
            if transcript is not None:
                streams.join_transcript(stream, transcript)
                stream.fall_behind()
            while True:
                await sender.wait(sessions)
                if stream.ending is not None:
                    yield {"event": ENDED, "data": stream.ending}
                    return
                if stream.failed:
                    return
                for event in await sender.pending():
                    yield event
        finally:
            await streams.leave(stream)

    return EventSourceResponse(events(), ping=ping_s)
