"""What the live pages' streams share: one bus subscription and one render for every stream that
shows the same thing, and the bounds on how many streams a viewer may hold.

A stream does not follow the bus itself: it joins feeds. A panel feed (``PanelFeed``) is keyed by
what its panel shows and to whom (the view, its parameters, and the principal, or the session
when the panel carries the session's CSRF token): it renders the panel once per change and hands
the same bytes to every stream that joined it. A burst of changes is rendered at once and then at
most every ``refresh_s``; a change that arrives while a render runs makes another, so the last
state is always shown. All the panels of one principal take turns (``turn``): a few renders an
interval in all, however many different panels it holds open. A transcript feed
(``TranscriptFeed``) renders each new message of a channel once for every stream of it, whoever
reads it, and when the channel's members change it asks again, for each reader, whether it may
still read (``recheck``): a reader that may not has its stream ended. A principal's guard ends
the streams whose token was revoked.

Every stream belongs to a web session (``LiveStreams``): a session holds at most
``per_session`` streams and a principal at most ``per_principal`` over all its sessions (one more
is refused ``live_streams_exceeded``), and when a session ends (signed out, replaced, evicted,
expired, its token revoked) its streams end at once with a last ``ended`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from markupsafe import escape

from parley.core.errors import CallerError, ParleyError, RateLimited, Unauthenticated
from parley.core.identity import Principal
from parley.core.ports import Subscription
from parley.service.conversations.transcripts import ACCESS_CHANGED
from parley.service.hub import Hub
from parley.service.identity import TOKENS_REVOKED, revocation_topic
from parley.surfaces.web.auth import PREFIX, Viewer
from parley.surfaces.web.render import fragment
from parley.surfaces.web.sessions import EndReason, WebSession, WebSessions

log = logging.getLogger("parley.web")

SseEvent = dict[str, str]
Key = tuple[Hashable, ...]

PRINCIPAL_RENDERS = 4
"""Renders of one principal's panels, all together, in one refresh interval: with the default
0.25 s, 16 a second however many different panels it holds open (each one refreshes at most
four times a second)."""
MAX_ITEMS = 1000
"""Messages a stream holds for a slow browser; past them it reads the store again."""
ENDED = "ended"
"""The last event of a stream that ends for good: the page shows it and stops listening."""


def notice(text: str, *, sign_in: bool = False) -> str:
    """The HTML of an ``ended`` event: ``text`` (escaped), with a link to sign in again."""
    link = f' <a href="{PREFIX}/signin">Sign in again</a>.' if sign_in else ""
    return f'<p class="flash" role="alert">{escape(text)}{link}</p>'


SIGNED_OUT = notice("Your session ended (the token was rotated).", sign_in=True)
SESSION_ENDED: dict[EndReason, str] = {
    "signed_out": notice("You signed out.", sign_in=True),
    "replaced": notice("You signed in again in this browser; reload this page."),
    "evicted": notice(
        "This session was closed: its principal signed in more often than it may hold "
        "sessions, and this was its oldest.",
        sign_in=True,
    ),
    "expired": notice("Your session expired.", sign_in=True),
    "revoked": SIGNED_OUT,
}


def refused(exc: ParleyError) -> str:
    """The ``ended`` notice of a stream whose viewer may no longer see what it shows."""
    return notice(f"This page stopped updating: {exc.message} ({exc.code}).")


class Stream:
    """One open live stream: what it has still to send, and how it ends. It holds the latest
    rendering of each panel (none it has sent already) and the new messages in order."""

    def __init__(self, viewer: Viewer) -> None:
        self.viewer = viewer
        self.wake = asyncio.Event()
        self.ending: str | None = None
        self.behind = False
        self.failed = False
        self.feeds: list[Feed] = []
        self._panels: dict[str, str] = {}
        self._sent: dict[str, str] = {}
        self._items: deque[tuple[int, str]] = deque()

    def offer(self, event: str, html: str) -> None:
        """A panel's newest rendering, sent as event ``event`` unless the page has it already."""
        if self._sent.get(event) == html:
            self._panels.pop(event, None)
            return
        self._panels[event] = html
        self.wake.set()

    def push(self, seq: int, html: str) -> None:
        """A new message; one too many for a slow browser makes the stream read the store."""
        if self.ending is not None or self.behind:
            return
        if len(self._items) >= MAX_ITEMS:
            self.fall_behind()
            return
        self._items.append((seq, html))
        self.wake.set()

    def fall_behind(self) -> None:
        """What was pushed may be incomplete (the bus overflowed): read the store again."""
        self._items.clear()
        self.behind = True
        self.wake.set()

    def end(self, html: str) -> None:
        """End the stream with a last ``ended`` event; nothing after it is sent."""
        if self.ending is None:
            self.ending = html
            self.wake.set()

    def fail(self) -> None:
        """End the stream without a last event: the browser reconnects by itself."""
        self.failed = True
        self.wake.set()

    def take_items(self) -> list[tuple[int, str]]:
        items = list(self._items)
        self._items.clear()
        return items

    def take_panels(self) -> list[SseEvent]:
        events = [{"event": event, "data": html} for event, html in self._panels.items()]
        self._sent.update(self._panels)
        self._panels.clear()
        return events


class Feed:
    """Bus items on some topics, read by one task for every stream that joined."""

    def __init__(self, owner: LiveStreams, key: Key, topics: list[str]) -> None:
        self.key = key
        self.owner = owner
        self.listeners: set[Stream] = set()
        self._sub: Subscription = owner.hub.bus.subscribe(topics)
        self._tasks = [asyncio.create_task(self._read(), name=f"parley-web-feed-{key[0]}")]

    def join(self, stream: Stream) -> None:
        self.listeners.add(stream)

    async def leave(self, stream: Stream) -> None:
        self.listeners.discard(stream)
        if not self.listeners:
            await self.close()

    def retire(self) -> None:
        """No stream joins this feed any more (it failed, or it is closing): a new stream of
        the same key gets a new one."""
        if self.owner._feeds.get(self.key) is self:
            del self.owner._feeds[self.key]

    async def close(self) -> None:
        self.retire()
        for task in self._tasks:
            task.cancel()
        await self._sub.close()

    async def _read(self) -> None:
        try:
            while True:
                batch = [await self._sub.get()]
                drain = getattr(self._sub, "get_nowait", None)
                while drain is not None and (queued := drain()) is not None:
                    batch.append(queued)
                await self.on_batch(batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a live feed (%s) failed; its pages reconnect", self.key[0])
            self.retire()
            for stream in list(self.listeners):
                stream.fail()

    async def on_batch(self, batch: list[dict[str, Any]]) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Panel:
    """A panel of a live page: sent as event ``event`` (the fragment's root id), rendered by
    ``render`` again after a batch holding a ``relevant`` bus item on ``topics`` (every item
    when None). ``key`` says which streams may share a rendering: ``Panel.key_for``."""

    event: str
    key: Key
    topics: tuple[str, ...]
    render: Callable[[], Awaitable[str]]
    relevant: Callable[[dict[str, Any]], bool] | None = None

    @staticmethod
    def key_for(viewer: Viewer, *what: Hashable, session: bool = False) -> Key:
        """What a panel shows (``what``: the view and its parameters) and to whom: the
        principal, or with ``session`` the session (a panel that carries its CSRF token)."""
        if session:
            return ("panel", *what, "session", viewer.session.key)
        return ("panel", *what, "principal", viewer.principal.id)


class PanelFeed(Feed):
    """One panel rendered for every stream that shows it to the same viewer."""

    def __init__(self, owner: LiveStreams, panel: Panel, who: str) -> None:
        super().__init__(owner, panel.key, list(panel.topics))
        self.panel = panel
        self.who = who  # the principal it is rendered for
        self._due = asyncio.Event()  # set: a render is owed
        self._due.set()
        self._last: float | None = None
        self._tasks.append(asyncio.create_task(self._render(), name="parley-web-panel"))

    def join(self, stream: Stream) -> None:
        # The page was rendered before its stream joined: what changed in between must not be
        # lost, so a joining stream gets a rendering made after it joined.
        super().join(stream)
        self._due.set()

    async def on_batch(self, batch: list[dict[str, Any]]) -> None:
        relevant = self.panel.relevant
        if (
            relevant is None
            or any(d.get("type") == "overflow" for d in batch)
            or any(map(relevant, batch))
        ):
            self._due.set()

    async def _render(self) -> None:
        while True:
            await self._due.wait()
            if self._last is not None:
                wait = self._last + self.owner.refresh_s - self.owner.clock()
                if wait > 0:
                    await self.owner.pace(wait)
            await self.owner.turn(self.who)
            # Cleared before the store is read: a change committed during the render makes
            # another one, so the panel always ends up showing the last state.
            self._due.clear()
            try:
                html = await self.panel.render()
            except CallerError as exc:
                self.retire()
                for stream in list(self.listeners):
                    stream.end(refused(exc))
                return
            except Exception:
                log.exception("a live panel (%s) failed to render; its pages reconnect", self.key)
                self.retire()
                for stream in list(self.listeners):
                    stream.fail()
                return
            self._last = self.owner.clock()
            self.owner.renders += 1
            for stream in list(self.listeners):
                stream.offer(self.panel.event, html)


@dataclass(frozen=True)
class Transcript:
    """The messages of a channel as a live page shows them. ``backfill(after)`` reads, as the
    viewer, the messages after a seq (JSON dicts); ``recheck(principal)`` raises if the
    principal may no longer read them."""

    key: Key
    topic: str
    backfill: Callable[[int], Awaitable[list[dict[str, Any]]]]
    recheck: Callable[[Principal], Awaitable[object]]


def message_html(message: dict[str, Any]) -> str:
    return fragment("_message.html", m=message)


class TranscriptFeed(Feed):
    """A channel's new messages, each rendered once for every stream that reads them."""

    def __init__(self, owner: LiveStreams, transcript: Transcript) -> None:
        super().__init__(owner, transcript.key, [transcript.topic])
        self.transcript = transcript

    async def on_batch(self, batch: list[dict[str, Any]]) -> None:
        for item in batch:
            kind = item.get("type")
            if kind == "message":
                html = message_html(item["message"])
                for stream in self.listeners:
                    stream.push(int(item["seq"]), html)
            elif kind == "overflow":
                for stream in self.listeners:
                    stream.fall_behind()
            elif kind == ACCESS_CHANGED:
                # Members changed or the channel was deleted: the messages after this one are
                # for those who may still read them.
                await self._recheck()

    async def _recheck(self) -> None:
        readers: dict[str, list[Stream]] = {}
        for stream in self.listeners:
            readers.setdefault(stream.viewer.principal.id, []).append(stream)
        for streams in readers.values():
            try:
                await self.transcript.recheck(streams[0].viewer.principal)
            except CallerError as exc:
                for stream in streams:
                    stream.end(refused(exc))


class _Guard(Feed):
    """A principal's token revocations: the streams whose token no longer holds end."""

    async def on_batch(self, batch: list[dict[str, Any]]) -> None:
        if not any(d.get("type") in (TOKENS_REVOKED, "overflow") for d in batch):
            return
        for digest in {s.viewer.session.token_digest for s in self.listeners}:
            try:
                await self.owner.hub.identity.authenticate_digest(digest)
            except Unauthenticated:
                self.owner.sessions.end_for_token(digest)
                for stream in self.listeners:
                    if stream.viewer.session.token_digest == digest:
                        stream.end(SIGNED_OUT)


class LiveStreams:
    """The open live streams of this UI, by session and principal, and their shared feeds."""

    def __init__(
        self,
        hub: Hub,
        sessions: WebSessions,
        *,
        per_session: int,
        per_principal: int,
        refresh_s: float,
    ) -> None:
        self.hub = hub
        self.sessions = sessions
        self.per_session = per_session
        self.per_principal = per_principal
        self.refresh_s = refresh_s
        self.pace: Callable[[float], Awaitable[object]] = asyncio.sleep
        """How a panel waits for its next render (tests hold it)."""
        self.clock: Callable[[], float] = time.monotonic
        self.principal_renders = PRINCIPAL_RENDERS
        # When each principal's panels may render next (``turn``).
        self._turns: dict[str, float] = {}
        self.renders = 0
        self._feeds: dict[Key, Feed] = {}
        self._of_session: dict[str, set[Stream]] = {}
        self._of_principal: dict[str, set[Stream]] = {}
        sessions.on_end = self.session_ended

    def check(self, viewer: Viewer) -> None:
        """Refuse one more stream of a session or principal that holds as many as it may."""
        held = len(self._of_session.get(viewer.session.key, ()))
        if held >= self.per_session:
            raise self._exceeded(
                viewer, held, self.per_session, "this sign-in session", "PER_SESSION"
            )
        held = len(self._of_principal.get(viewer.principal.id, ()))
        if held >= self.per_principal:
            raise self._exceeded(
                viewer, held, self.per_principal, "its sessions together", "PER_PRINCIPAL"
            )

    @staticmethod
    def _exceeded(viewer: Viewer, held: int, limit: int, where: str, env: str) -> RateLimited:
        return RateLimited(
            f"{viewer.principal.id!r} has {held} live pages open in {where}, as many as it may "
            f"({limit}); close one (or its tab) and this page goes live by itself. The operator "
            f"sets the limit with PARLEY_UI_LIVE_STREAMS_{env}",
            code="live_streams_exceeded",
            retry_after=5.0,
            limit=limit,
        )

    def enter(self, stream: Stream) -> None:
        """Count a stream in (raises like ``check``) and watch its principal's token."""
        viewer = stream.viewer
        self.check(viewer)
        if not self.sessions.alive(viewer.session):
            stream.end(SESSION_ENDED["expired"])
        self._of_session.setdefault(viewer.session.key, set()).add(stream)
        self._of_principal.setdefault(viewer.principal.id, set()).add(stream)
        guard: Key = ("guard", viewer.principal.id)
        topics = [revocation_topic(viewer.principal.id)]
        self._join(stream, guard, lambda: _Guard(self, guard, topics))

    def join_panel(self, stream: Stream, panel: Panel) -> None:
        who = stream.viewer.principal.id
        self._join(stream, panel.key, lambda: PanelFeed(self, panel, who))

    def join_transcript(self, stream: Stream, transcript: Transcript) -> None:
        self._join(stream, transcript.key, lambda: TranscriptFeed(self, transcript))

    async def turn(self, who: str) -> None:
        """Wait for the principal's next render: its panels, all of them together, render at
        most ``principal_renders`` times a refresh interval, so that a principal holding many
        different panels open (each coalesced on its own) still costs the hub a bounded share."""
        if not self.refresh_s:
            return
        now = self.clock()
        at = max(now, self._turns.get(who, now))
        self._turns[who] = at + self.refresh_s / self.principal_renders
        if at > now:
            await self.pace(at - now)

    def _join(self, stream: Stream, key: Key, make: Callable[[], Feed]) -> None:
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = make()
        feed.join(stream)
        stream.feeds.append(feed)

    async def leave(self, stream: Stream) -> None:
        """The stream is over: count it out and leave its feeds (a feed nobody reads closes)."""
        viewer = stream.viewer
        for index, key in (
            (self._of_session, viewer.session.key),
            (self._of_principal, viewer.principal.id),
        ):
            held = index.get(key)
            if held is not None:
                held.discard(stream)
                if not held:
                    del index[key]
        if viewer.principal.id not in self._of_principal:
            self._turns.pop(viewer.principal.id, None)
        feeds, stream.feeds = stream.feeds, []
        for feed in feeds:
            with contextlib.suppress(Exception):
                await feed.leave(stream)

    def session_ended(self, session: WebSession, reason: EndReason) -> None:
        for stream in list(self._of_session.get(session.key, ())):
            stream.end(SESSION_ENDED[reason])

    def open_count(self, principal_id: str) -> int:
        return len(self._of_principal.get(principal_id, ()))
