"""The gate every HTTP request passes before the app: who is calling, how large its body may be
and how slowly it may arrive, and whether the token it came with still holds while it runs.

A request without a valid token is answered 401 before a single body byte is read, so a client
that cannot authenticate cannot make the hub hold a large body in memory. A body larger than
``request_max_bytes`` is refused with 413 (at once when its ``Content-Length`` says so, or as soon
as a chunked body grows past it); a body whose next part does not come within ``body_timeout_s``
is refused with 408. The principal it finds is the route's caller (``deps.Caller``): a request is
authenticated once.

When the principal's tokens are revoked (a rotation), the requests that may stay open end: an
event stream with a last ``error`` event, an ``/mcp`` request with 401 ``token_revoked`` if no
response has started. Only those are watched, so an ordinary request costs no watch; a long poll
(``mail wait``, ``wait_for_mail``, ``wait_for_turn``) is ended by the service layer itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

from starlette.datastructures import Headers, QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.core.errors import Unauthenticated
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.identity import revocation_topic, token_revoked
from parley.surfaces.mcp.auth import bearer_token
from parley.surfaces.mcp.http import PATH as MCP_PATH
from parley.surfaces.rest import errors
from parley.surfaces.rest.deps import CALLER, CALLER_TOKEN, STREAM_ROUTES

log = logging.getLogger("parley.rest")

PUBLIC_PATHS = frozenset(
    {
        "/healthz",
        "/readyz",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/openapi.json",
        "/favicon.ico",
    }
)
"""The paths anyone may reach: health checks, the API's own documentation and the icon every
browser asks for."""

WEB_PREFIX = "/ui"
"""The web UI's pages, which sign in with a session cookie of their own (surfaces/web)."""


def is_public(path: str) -> bool:
    """Whether the guard lets a request through without a bearer token: the public paths, the
    root (a redirect to the UI) and the UI, whose routes authenticate their session cookie."""
    return (
        path in PUBLIC_PATHS
        or path == "/"
        or path == WEB_PREFIX
        or path.startswith(WEB_PREFIX + "/")
    )


class BodyRefused(Exception):
    """Raised into the app from ``receive`` once the guard has refused the rest of a body."""


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str

    def response(self) -> JSONResponse:
        # Connection: close, since the rest of the request body may still be on the wire.
        return JSONResponse(
            {"code": self.code, "message": self.message, "details": {}},
            status_code=self.status,
            headers={"Connection": "close"},
        )


def declared_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    if value is None or not value.isdigit():
        return None  # h11 and httptools refuse a malformed Content-Length themselves
    return int(value)


class _Exchange:
    """One request as the guard sees it: the body read so far and the response sent so far.
    Once a refusal is decided, the app's own response is replaced by it."""

    def __init__(
        self, scope: Scope, receive: Receive, send: Send, *, max_bytes: int, timeout_s: float
    ) -> None:
        self._scope = scope
        self._receive = receive
        self._send = send
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self.received = 0
        self.body_done = False
        self.refusal: Refusal | None = None
        self.refusal_sent = False
        self.started = False
        self.complete = False
        self.event_stream = False
        # Set while the guard checks whether a revocation concerns this request's token: the
        # response waits, so nothing more is sent to a caller who may have lost its right to it.
        self.checking: asyncio.Future[None] | None = None

    async def receive(self) -> Message:
        if self.body_done:
            # After the body only a disconnect can come, and an open stream waits for it.
            return await self._receive()
        try:
            async with asyncio.timeout(self._timeout_s):
                message = await self._receive()
        except TimeoutError:
            raise self.refuse(
                Refusal(
                    408,
                    "request_timeout",
                    f"the request body stopped arriving: no part of it came for "
                    f"{self._timeout_s:g} s; send the whole body without pausing",
                )
            ) from None
        if message["type"] != "http.request":
            self.body_done = True
            return message
        self.received += len(message.get("body", b""))
        if self.received > self._max_bytes:
            raise self.refuse(too_large(self._max_bytes))
        if not message.get("more_body", False):
            self.body_done = True
        return message

    def refuse(self, refusal: Refusal) -> BodyRefused:
        """Decide the answer to this request; the app's own response is replaced by it."""
        self.refusal = refusal
        return BodyRefused(refusal.message)

    async def send(self, message: Message) -> None:
        if self.checking is not None:
            await asyncio.shield(self.checking)
        if self.refusal is not None and not self.started:
            # Whatever the app answers to a body cut short, the caller learns why it was cut.
            await self.send_refusal()
            return
        if self.refusal_sent or self.complete:
            return
        if message["type"] == "http.response.start":
            self.started = True
            content_type = Headers(raw=message.get("headers", [])).get("content-type", "")
            self.event_stream = content_type.startswith("text/event-stream")
        elif message["type"] == "http.response.body":
            self.complete = not message.get("more_body", False)
        await self._send(message)

    async def send_refusal(self) -> None:
        if self.refusal_sent or self.started or self.refusal is None:
            return
        self.refusal_sent = True

        await self.refusal.response()(self._scope, self._receive, self._send)

    async def end(self, revoked: Unauthenticated) -> None:
        """End a request whose token was revoked: 401 before the response started, a last
        ``error`` event on an event stream, and a clean end of any other started body."""
        if self.complete or self.refusal_sent:
            return
        if not self.started:
            self.refusal_sent = True
            response = await errors.parley_error(Request(self._scope), revoked)
            await response(self._scope, self._receive, self._send)
            return
        body = b""
        if self.event_stream:
            body = f"event: error\ndata: {json.dumps(revoked.to_dict())}\n\n".encode()
        self.complete = True
        await self._send({"type": "http.response.body", "body": body, "more_body": False})


def too_large(limit: int) -> Refusal:
    return Refusal(
        413,
        "request_too_large",
        f"the request body is larger than the hub accepts ({limit} bytes); send a smaller "
        "one (the operator sets the limit with PARLEY_REQUEST_MAX_BYTES)",
    )


class RequestGuard:
    """Pure ASGI middleware in front of every route of the app, ``/mcp`` included."""

    def __init__(self, app: ASGIApp, *, hub: Hub) -> None:
        self.app = app
        self.hub = hub
        # The same templates the routes use; the guard runs before routing.
        self._streams = [compile_path(template)[0] for template in STREAM_ROUTES]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = self.hub.settings
        exchange = _Exchange(
            scope,
            receive,
            send,
            max_bytes=settings.request_max_bytes,
            timeout_s=settings.body_timeout_s,
        )
        headers = Headers(scope=scope)
        principal: Principal | None = None
        token: str | None = None
        stream = self._is_stream(scope)
        if not is_public(scope["path"]):
            token = bearer_token(headers)
            if token is None and stream:
                # Browsers' EventSource cannot set headers: the event streams alone take ?token=.
                token = QueryParams(scope.get("query_string", b"")).get("token") or None
            try:
                principal = await self.hub.identity.authenticate(token)
            except Unauthenticated as exc:
                response = await errors.parley_error(Request(scope), exc)
                response.headers["Connection"] = "close"
                await response(scope, receive, send)
                return
            state = scope.setdefault("state", {})
            state[CALLER] = principal
            state[CALLER_TOKEN] = token
        declared = declared_length(headers)
        # A request without a body gets its one empty message at once: no timer is needed.
        exchange.body_done = declared == 0 or (
            declared is None and "transfer-encoding" not in headers
        )
        if declared is not None and declared > settings.request_max_bytes:
            exchange.refuse(too_large(settings.request_max_bytes))
            await exchange.send_refusal()
            return
        if principal is None or token is None or not (stream or scope["path"] == MCP_PATH):
            # An ordinary request ends within moments: only one that may stay open is watched.
            await self._run(scope, exchange)
            return
        await self._run_watched(scope, exchange, principal, token)

    async def _run(self, scope: Scope, exchange: _Exchange) -> None:
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception:
            if exchange.refusal is None:
                raise
            # The app failed because the guard cut its body short; the refusal says why.
        await exchange.send_refusal()

    async def _run_watched(
        self, scope: Scope, exchange: _Exchange, principal: Principal, token: str
    ) -> None:
        """Run the request while watching for the revocation of the principal's tokens."""
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        revoked: list[Unauthenticated] = []
        sub = self.hub.bus.subscribe([revocation_topic(principal.id)])

        async def watch() -> None:
            while True:
                await sub.get()
                exchange.checking = asyncio.get_running_loop().create_future()
                try:
                    await self.hub.identity.authenticate(token)
                except Exception as exc:
                    # A token that cannot be confirmed after a revocation is treated as revoked.
                    if not isinstance(exc, Unauthenticated):
                        log.warning("a token could not be checked after a revocation: %s", exc)
                    revoked.append(token_revoked(principal.id))
                    task.cancel()
                    return
                finally:
                    exchange.checking.set_result(None)
                    exchange.checking = None

        watcher = asyncio.create_task(watch(), name="parley-revocation-watch")
        try:
            await self._run(scope, exchange)
        except asyncio.CancelledError:
            # Only the watcher's own cancellation is absorbed; any other (the server shutting
            # down, the client gone) goes on.
            if not revoked or task.uncancel() > cancelling:
                raise
        else:
            if revoked:  # the app swallowed the cancellation: take back the request for it
                task.uncancel()
        finally:
            watcher.cancel()
            await sub.close()
        if revoked:
            with contextlib.suppress(OSError):
                await exchange.end(revoked[0])

    def _is_stream(self, scope: Scope) -> bool:
        """Whether the request is for an event stream, by the route templates (``DELETE
        /v1/tasks/stream``, the task route with the id "stream", is not one)."""
        path = scope["path"]
        return scope["method"] == "GET" and any(r.fullmatch(path) for r in self._streams)
