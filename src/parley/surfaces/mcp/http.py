"""``/mcp``: the MCP server over Streamable HTTP inside the hub's web app.

One MCP server and session manager per profile; ``/mcp?profile=mail`` picks one (``default``
without the parameter). A client keeps using the URL it connected with, so every request of a
session reaches the manager that created it. A request without a valid bearer token is refused
with 401 by the request guard in front of the app before any MCP session exists, and each session
is bound to the principal that opened it; each tool call then authenticates its own request again
(:mod:`.auth`).

The endpoint counts the sessions of every principal over all profiles (:mod:`.sessions`): it
learns a session's id from the answer to the request that opened it, and ends a session the way
a client does, with a ``DELETE`` of it through its session manager. It ends a principal's
sessions whose token no longer holds when the principal's tokens are revoked (the bus carries
the notice from whichever hub rotated them), and any session idle for ``mcp_session_idle_s``.

The MCP SDK and the servers are loaded by the first request to ``/mcp``, not when the hub
starts: they are a third of the hub's start-up time (Q7), and a hub used only over REST never
needs them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from parley.core.errors import NotFound, ParleyError, Unauthenticated
from parley.core.identity import Principal, hash_token
from parley.core.ports import Subscription
from parley.service.hub import Hub
from parley.service.identity import revocation_topic
from parley.surfaces.mcp.auth import bearer_token
from parley.surfaces.mcp.sessions import McpSession, SessionTable
from parley.surfaces.rest import errors
from parley.surfaces.rest.deps import CALLER

if TYPE_CHECKING:
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

PATH = "/mcp"
SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"

log = logging.getLogger("parley.mcp")


def _build_managers(hub: Hub) -> dict[str, StreamableHTTPSessionManager]:
    from mcp.server.transport_security import TransportSecuritySettings

    from parley.surfaces.mcp.server import PROFILES, build_mcp

    # Every request must carry a parley bearer token, which a page that rebinds DNS to this
    # host cannot have; the SDK's Host/Origin check would only refuse proxies.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    settings = hub.settings
    managers = {}
    for profile in PROFILES:
        server = build_mcp(hub, profile)
        # The endpoint's own table is the limit, over all profiles; the SDK's, per profile, only
        # backs it up.
        server.streamable_http_app(
            transport_security=security,
            session_idle_timeout=settings.mcp_session_idle_s,
            max_sessions=settings.mcp_sessions_max,
        )
        managers[profile] = server.session_manager
    return managers


def _user(principal_id: str, token: str) -> AuthenticatedUser:
    """The request's user as the SDK sees it. The SDK binds a session to the principal that
    opened it (the client id) and answers any request for that session by another principal
    as if the session did not exist."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    return AuthenticatedUser(AccessToken(token=token, client_id=principal_id, scopes=[]))


def _stateful(headers: Headers) -> bool:
    """Whether the SDK serves the request with a session: a request of a protocol version that
    starts with ``initialize`` (a later one, or an unknown one, is served without any)."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    version = headers.get(VERSION_HEADER)
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


@dataclass(eq=False)
class _Watch:
    """The revocation notices of one principal with sessions open on this hub."""

    sub: Subscription
    task: asyncio.Task[None] | None = None
    notices: int = 0
    busy: bool = False


class McpEndpoint:
    """The ASGI app behind ``/mcp``; run :meth:`run` in the web app's lifespan."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.managers: dict[str, StreamableHTTPSessionManager] = {}
        self.sessions = SessionTable(hub.settings, hub.ctx.clock.monotonic)
        self._watches: dict[str, _Watch] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wanted = asyncio.Event()
        self._ready = asyncio.Event()
        self._failure: BaseException | None = None
        self._running = False

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve MCP for as long as the web app runs; leaving cancels the open MCP sessions."""
        # The session managers' task groups must be entered and left by one task: this one,
        # started now, enters them once the first request wants them.
        owner = asyncio.create_task(self._own_managers())
        self._running = True
        try:
            yield
        finally:
            self._running = False
            tasks = [owner, *self._tasks, *(w.task for w in self._watches.values() if w.task)]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _own_managers(self) -> None:
        await self._wanted.wait()
        try:
            async with AsyncExitStack() as stack:
                try:
                    self.managers = _build_managers(self.hub)
                    for manager in self.managers.values():
                        await stack.enter_async_context(manager.run())
                except Exception as exc:
                    self._failure = exc
                    raise
                finally:
                    self._ready.set()
                await self._end_idle_sessions_forever()  # until the lifespan ends
        except Exception:
            log.exception("the MCP endpoint could not start")

    async def _started(self) -> None:
        if not self._running:
            raise RuntimeError("the MCP endpoint serves only while the web app's lifespan runs")
        self._wanted.set()
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from parley.surfaces.mcp.server import PROFILES

        await self._started()
        request = Request(scope, receive)
        profile = request.query_params.get("profile", "default")
        manager = self.managers.get(profile)
        if manager is None:
            combine = (
                "; profiles do not combine: configure one MCP server entry per profile you need"
                if "," in profile
                else ""
            )
            refusal = NotFound(
                f"MCP profile {profile!r} is unknown; use {PATH}?profile=<one of "
                f"{', '.join(PROFILES)}>{combine}",
                code="unknown_profile",
                profiles=list(PROFILES),
            )
            await (await errors.parley_error(request, refusal))(scope, receive, send)
            return
        # The request guard has authenticated the bearer token (or refused the request).
        principal: Principal = getattr(request.state, CALLER)
        token = bearer_token(request.headers)
        assert token is not None
        scope_with_user: dict[str, Any] = {**scope, "user": _user(principal.id, token)}
        session_id = request.headers.get(SESSION_HEADER)
        if not _stateful(request.headers):
            await manager.handle_request(scope_with_user, receive, send)
        elif session_id is None:
            await self._open(profile, principal, token, scope_with_user, receive, send)
        else:
            await self._serve(session_id, principal, manager, scope_with_user, receive, send)

    async def _open(
        self,
        profile: str,
        principal: Principal,
        token: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Serve a request that opens a session, if the principal may hold one more."""
        try:
            opening, idle = self.sessions.admit(principal)
        except ParleyError as refusal:
            await (await errors.parley_error(Request(scope), refusal))(scope, receive, send)
            return
        watch = self._watch(principal.id)
        notices = watch.notices
        opened: McpSession | None = None

        async def send_opening(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                session_id = Headers(raw=message["headers"]).get(SESSION_HEADER)
                if session_id is not None:
                    # Counted before the client can learn the id, so no request of the session
                    # comes before it.
                    opened = McpSession(session_id, principal.id, profile, hash_token(token))
                    self.sessions.opened(opening, opened)
            await send(message)

        try:
            if idle is not None:
                await self._close(idle)
            await self.managers[profile].handle_request(scope, receive, send_opening)
        finally:
            self.sessions.release(opening)
            if opened is None:
                self._unwatch_if_done(principal.id)
            elif watch.notices != notices:
                # A revocation came while the session was opening, maybe before it was counted.
                self._spawn(self._end_revoked(principal.id))

    async def _serve(
        self,
        session_id: str,
        principal: Principal,
        manager: StreamableHTTPSessionManager,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Serve a request of an open session, counting it in flight while it runs."""
        session = self.sessions.begin(session_id, principal.id)
        if session is None:
            # Not a session the principal holds here: the SDK answers (404 for one that ended).
            await manager.handle_request(scope, receive, send)
            return
        status = 0

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await manager.handle_request(scope, receive, send_counted)
        finally:
            self.sessions.end(session)
        # The session is gone: its client ended it, or the SDK did (it had been idle too long).
        ended = scope["method"] == "DELETE" and 200 <= status < 300
        if (ended or status == 404) and self.sessions.forget(session.id) is not None:
            self._unwatch_if_done(principal.id)

    # -- ending sessions ------------------------------------------------------------------------
    async def end_idle_sessions(self) -> int:
        """End the sessions without a request in flight for ``mcp_session_idle_s``; returns
        how many there were."""
        since = self.hub.ctx.clock.monotonic() - self.hub.settings.mcp_session_idle_s
        idle = self.sessions.idle_since(since)
        for session in idle:
            await self._end(session)
        return len(idle)

    async def _end_idle_sessions_forever(self) -> None:
        # The SDK ends such a session too, but only this frees its place in the table.
        every_s = min(self.hub.settings.mcp_session_idle_s / 4, 60.0)
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.end_idle_sessions()
            except Exception:
                log.exception("idle MCP sessions could not be ended")

    async def _end_revoked(self, principal_id: str) -> None:
        """End the principal's sessions opened with a token that no longer holds."""
        by_token: dict[str, list[McpSession]] = {}
        for session in self.sessions.sessions_of(principal_id):
            by_token.setdefault(session.token_digest, []).append(session)
        for digest, sessions in by_token.items():
            try:
                await self.hub.identity.authenticate_digest(digest)
                continue
            except Unauthenticated:
                pass
            except Exception as exc:
                # A token that cannot be confirmed after a revocation is treated as revoked.
                log.warning("a token could not be checked after a revocation: %s", exc)
            for session in sessions:
                await self._end(session)

    async def _end(self, session: McpSession) -> None:
        """End a session the table counts, unless something else ended it meanwhile."""
        if self.sessions.forget(session.id) is not None:
            self._unwatch_if_done(session.principal_id)
            await self._close(session)

    async def _close(self, session: McpSession) -> None:
        """Close a session the table no longer counts, as its client would: ``DELETE`` it."""
        manager = self.managers[session.profile]
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": PATH,
            "raw_path": PATH.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(SESSION_HEADER.encode(), session.id.encode())],
            "client": None,
            "server": None,
            "user": _user(session.principal_id, ""),
        }
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(_: Message) -> None:
            return None

        async def close() -> None:
            try:
                await manager.handle_request(scope, receive, discard)
            except Exception:
                log.exception("MCP session %s could not be ended", session.id[:8])

        # Shielded: a session left open by a cancelled caller would be counted by nobody.
        await asyncio.shield(self._spawn(close()))

    def _spawn(self, job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- revocations ----------------------------------------------------------------------------
    def _watch(self, principal_id: str) -> _Watch:
        """Follow the principal's revocation notices while it holds sessions here."""
        watch = self._watches.get(principal_id)
        if watch is None:
            watch = _Watch(self.hub.bus.subscribe([revocation_topic(principal_id)]))
            watch.task = asyncio.create_task(
                self._follow(principal_id, watch), name="parley-mcp-revocations"
            )
            self._watches[principal_id] = watch
        return watch

    async def _follow(self, principal_id: str, watch: _Watch) -> None:
        try:
            while True:
                await watch.sub.get()
                watch.notices += 1
                watch.busy = True
                try:
                    await self._end_revoked(principal_id)
                except Exception:
                    log.exception("the MCP sessions of %r could not be checked", principal_id)
                finally:
                    watch.busy = False
                if not self.sessions.held(principal_id):
                    return
        finally:
            if self._watches.get(principal_id) is watch:
                del self._watches[principal_id]
            await watch.sub.close()

    def _unwatch_if_done(self, principal_id: str) -> None:
        """Stop following a principal that holds no session any more (one still busy with a
        notice stops by itself once done)."""
        if self.sessions.held(principal_id):
            return
        watch = self._watches.get(principal_id)
        if watch is not None and not watch.busy and watch.task is not None:
            del self._watches[principal_id]
            watch.task.cancel()
