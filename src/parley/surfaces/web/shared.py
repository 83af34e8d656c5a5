"""One live connection per browser: the streams of all its open pages over one response.

A browser holds few HTTP/1.1 connections to one origin (six in Chromium) and an open page's live
stream holds one for as long as the page is open: the sixth tab of one browser would hang. So the
pages of a browser do not open their streams themselves: a shared worker (``live-worker.js``;
in the page itself where a browser has none) opens ``/ui/live`` once, naming every page stream
it wants (``u``, each a ``/ui/…/live`` URL) and the last event each one saw (``l``, its
Last-Event-ID), and hands each event to the page it belongs to. When a page opens or closes, the
worker opens the shared stream again with the new list (a page ignores a panel it holds already,
and a transcript resumes after its last message).

Each named stream is the page stream itself, run in-process with the browser's own request
headers: the same session, visibility checks and bounds (one more than a session may hold is
refused ``live_streams_exceeded`` and said as ``_notlive`` until it opens), the same ``ended``
event. Every event goes out as ``x`` whose data is ``{"s": index, "e": event, "i": id, "d":
data}``; ``_open`` says a stream opened, ``_notlive`` that it could not (it is tried again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Request
from sse_starlette.sse import EventSourceResponse

from parley.core.errors import InvalidRequest
from parley.surfaces.web.auth import PREFIX, ViewerDep
from parley.surfaces.web.feeds import ENDED, notice

router = APIRouter()

MAX_STREAMS = 32
"""Page streams one shared stream may carry (the session's own bound applies to each)."""
REPLACE_WAIT_S = 2.0
"""How long a new shared stream waits for the one it replaces to let its page streams go (or
for one of its own to answer) before it goes on regardless."""
RETRY_S = 1.0
"""How soon a page stream that could not open, or closed without ending, is tried again; each
refusal in a row doubles it, up to ``RETRY_MAX_S`` (a browser opens the shared stream again
anyway when one of its pages closes, which is when a refused stream may fit)."""
RETRY_MAX_S = 30.0
KEPT_HEADERS = {b"cookie", b"host", b"user-agent", b"origin", b"x-forwarded-for"}
"""The browser's headers a page stream sees (no Accept-Encoding: the relay reads plain text)."""

_relays: set[asyncio.Task[None]] = set()  # running relays (a task nobody holds is collected)

Urls = Annotated[list[str], Query(max_length=MAX_STREAMS)]
Name = Annotated[str, Query(max_length=64)]
LastIds = Annotated[list[str] | None, Query(alias="l", max_length=MAX_STREAMS)]


def _page_stream(url: str) -> tuple[str, str]:
    """The path and query of a page stream, or InvalidRequest: a /ui/…/live URL of this hub."""
    parts = urlsplit(url)
    if (
        parts.scheme
        or parts.netloc
        or len(url) > 1024
        or not parts.path.startswith(PREFIX + "/")
        or not parts.path.endswith("/live")
        or parts.path == f"{PREFIX}/live"
    ):
        raise InvalidRequest(f"not a live page stream of this hub: {url[:80]!r}")
    return parts.path, parts.query


def _events(buffer: str) -> tuple[list[dict[str, str]], str]:
    """The complete server-sent events at the head of ``buffer`` and what is left of it."""
    found: list[dict[str, str]] = []
    *blocks, rest = buffer.replace("\r\n", "\n").split("\n\n")
    for block in blocks:
        event: dict[str, str] = {}
        data: list[str] = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue  # a ping
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                data.append(value)
            elif field in ("event", "id"):
                event[field] = value
        if data or event:
            event["data"] = "\n".join(data)
            found.append(event)
    return found, rest


class _Relay:
    """One page stream of a shared stream, run against the app as the browser's request."""

    def __init__(
        self, request: Request, index: int, url: str, last: str, out: asyncio.Queue[str]
    ) -> None:
        self.app = request.app
        self.base = request.scope
        self.index = index
        self.path, self.query = _page_stream(url)
        self.last = last
        self.out = out
        self.stop = asyncio.Event()
        self.started = asyncio.Event()  # answered (or failed) once: the next one may start
        self.done = asyncio.Event()
        self.ended = False

    def put(self, event: str, data: str = "", id_: str = "") -> None:
        self.out.put_nowait(json.dumps({"s": self.index, "e": event, "i": id_, "d": data}))

    def _scope(self) -> dict[str, Any]:
        headers = [(k, v) for k, v in self.base["headers"] if k in KEPT_HEADERS]
        headers.append((b"accept", b"text/event-stream"))
        if self.last:
            headers.append((b"last-event-id", self.last.encode("latin-1", "replace")))
        scope = {
            key: self.base[key]
            for key in ("type", "asgi", "http_version", "scheme", "server", "client", "state")
            if key in self.base
        }
        scope.update(
            method="GET",
            path=self.path,
            raw_path=self.path.encode(),
            root_path=self.base.get("root_path", ""),
            query_string=self.query.encode(),
            headers=headers,
        )
        return scope

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.started.set()
            self.done.set()

    async def _run(self) -> None:
        refusals = 0
        while not self.stop.is_set() and not self.ended:
            status, retry = await self._once()
            self.started.set()
            if self.ended or self.stop.is_set():
                return
            if status == 401:
                self.put(ENDED, notice("Your session ended.", sign_in=True))
                return
            if status not in (200, 429):
                self.put(ENDED, notice(f"This page stopped updating (HTTP {status})."))
                return
            wait = RETRY_S
            if status == 429:
                self.put("_notlive")
                wait = min(max(retry, RETRY_S) * 2**refusals, RETRY_MAX_S)
                refusals += 1
            else:
                refusals = 0
            try:
                async with asyncio.timeout(wait):
                    await self.stop.wait()
            except TimeoutError:
                pass

    async def _once(self) -> tuple[int, float]:
        """One attempt: its status and, when refused, the Retry-After it said."""
        started: dict[str, Any] = {}
        buffer = ""
        sent_request = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_request
            if not sent_request:
                sent_request = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self.stop.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal buffer
            if message["type"] == "http.response.start":
                self.started.set()
                started["status"] = message["status"]
                started["headers"] = dict(message.get("headers", []))
                if message["status"] == 200:
                    self.put("_open")
                return
            if message["type"] != "http.response.body" or started.get("status") != 200:
                return
            buffer += message.get("body", b"").decode("utf-8", "replace")
            events, buffer = _events(buffer)
            for event in events:
                name = event.get("event", "message")
                if "id" in event:
                    self.last = event["id"]
                self.put(name, event["data"], event.get("id", ""))
                if name == ENDED:
                    self.ended = True
                    self.stop.set()  # the page stream ends here: let it go

        await self.app(self._scope(), receive, send)
        retry = started.get("headers", {}).get(b"retry-after", b"1")
        return int(started.get("status", 500)), float(retry) if retry.isdigit() else RETRY_S


def _opened(request: Request) -> dict[tuple[str, str], list[_Relay]]:
    """The open shared streams of this UI by (session, the browser's name for it)."""
    found: dict[tuple[str, str], list[_Relay]] | None = getattr(
        request.app.state, "web_shared", None
    )
    if found is None:
        found = request.app.state.web_shared = {}
    return found


async def _start(relays: list[_Relay], replaced: list[_Relay]) -> None:
    """End the streams of the shared stream this one replaces first (their pages' streams
    count against the session's bound until they have left), then start each in the order the
    browser named them: its pages get their streams in the order they opened."""
    for relay in replaced:
        relay.stop.set()
    for relay in replaced:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REPLACE_WAIT_S):
                await relay.done.wait()
    for relay in relays:
        task = asyncio.create_task(relay.run(), name="parley-web-shared-relay")
        _relays.add(task)
        task.add_done_callback(_relays.discard)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REPLACE_WAIT_S):
                await relay.started.wait()


@router.get("/live")
async def shared_live(
    request: Request,
    viewer: ViewerDep,
    u: Urls,
    last_ids: LastIds = None,
    name: Name = "",
    replaces: Name = "",
) -> EventSourceResponse:
    """The page streams ``u`` (resumed after ``l``, each in the same place) over one stream,
    named ``name`` by the browser; it ends the browser's stream ``replaces`` first."""
    last = list(last_ids or [])
    last += [""] * (len(u) - len(last))
    out: asyncio.Queue[str] = asyncio.Queue()
    relays = [_Relay(request, i, url, last[i], out) for i, url in enumerate(u)]
    opened = _opened(request)
    session = viewer.session.key
    replaced = opened.pop((session, replaces), []) if replaces else []
    if name:
        opened[(session, name)] = relays

    async def events() -> AsyncIterator[dict[str, str]]:
        starting = asyncio.create_task(_start(relays, replaced), name="parley-web-shared-start")
        _relays.add(starting)
        starting.add_done_callback(_relays.discard)
        try:
            while True:
                yield {"event": "x", "data": await out.get()}
        finally:
            # The browser went away: each page stream sees its own disconnect and ends as it
            # would have on its own connection.
            if name and opened.get((session, name)) is relays:
                del opened[(session, name)]
            starting.cancel()
            for relay in relays:
                relay.stop.set()

    return EventSourceResponse(events(), ping=15)
