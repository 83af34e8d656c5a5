"""``/mcp``: the MCP server over Streamable HTTP inside the hub's web app.

One MCP server and session manager per profile; ``/mcp?profile=mail`` picks one (``default``
without the parameter). A client keeps using the URL it connected with, so every request of a
session reaches the manager that created it. A request without a valid bearer token is refused
with 401 by the request guard in front of the app before any MCP session exists, and each session
is bound to the principal that opened it; each tool call then authenticates its own request again
(:mod:`.auth`).

The MCP SDK and the servers are loaded by the first request to ``/mcp``, not when the hub
starts: they are a third of the hub's start-up time (Q7), and a hub used only over REST never
needs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from parley.core.errors import NotFound
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.surfaces.mcp.auth import bearer_token
from parley.surfaces.rest import errors
from parley.surfaces.rest.deps import CALLER

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

PATH = "/mcp"

log = logging.getLogger("parley.mcp")


def _build_managers(hub: Hub) -> dict[str, StreamableHTTPSessionManager]:
    from mcp.server.transport_security import TransportSecuritySettings

    from parley.surfaces.mcp.server import PROFILES, build_mcp

    # Every request must carry a parley bearer token, which a page that rebinds DNS to this
    # host cannot have; the SDK's Host/Origin check would only refuse proxies.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    managers = {}
    for profile in PROFILES:
        server = build_mcp(hub, profile)
        server.streamable_http_app(transport_security=security)
        managers[profile] = server.session_manager
    return managers


class McpEndpoint:
    """The ASGI app behind ``/mcp``; run :meth:`run` in the web app's lifespan."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.managers: dict[str, StreamableHTTPSessionManager] = {}
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
            owner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await owner

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
                await asyncio.Future()  # until the lifespan ends and cancels this task
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
            refusal = NotFound(
                f"MCP profile {profile!r} is unknown; use {PATH}?profile=<one of "
                f"{', '.join(PROFILES)}>",
                code="unknown_profile",
                profiles=list(PROFILES),
            )
            await (await errors.parley_error(request, refusal))(scope, receive, send)
            return
        # The request guard has authenticated the bearer token (or refused the request).
        principal: Principal = getattr(request.state, CALLER)
        token = bearer_token(request.headers)
        assert token is not None
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        # The SDK binds a session to the credential that opened it and answers any request
        # for that session with another credential as if the session did not exist.
        access = AccessToken(token=token, client_id=principal.id, scopes=[])
        scope_with_user: dict[str, Any] = {**scope, "user": AuthenticatedUser(access)}
        await manager.handle_request(scope_with_user, receive, send)
