"""``/mcp``: the MCP server over Streamable HTTP inside the hub's web app.

One MCP server and session manager per profile; ``/mcp?profile=mail`` picks one (``default``
without the parameter). A client keeps using the URL it connected with, so every request of a
session reaches the manager that created it. A request without a valid bearer token is refused
with 401 before any MCP session exists, and each session is bound to the principal that opened
it; each tool call then authenticates its own request again (:mod:`.auth`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from parley.core.errors import NotFound, ParleyError, Unauthenticated
from parley.service.hub import Hub
from parley.surfaces.mcp.auth import bearer_token
from parley.surfaces.mcp.server import PROFILES, build_mcp
from parley.surfaces.rest.errors import bearer_challenge

PATH = "/mcp"


def _error(exc: ParleyError, status: int) -> JSONResponse:
    # The header and the body's code say what is wrong with the token: an MCP client shows
    # little more than "Failed to connect" otherwise.
    headers = (
        {"WWW-Authenticate": bearer_challenge(exc)} if isinstance(exc, Unauthenticated) else None
    )
    return JSONResponse(exc.to_dict(), status_code=status, headers=headers)


class McpEndpoint:
    """The ASGI app behind ``/mcp``; run :meth:`run` in the web app's lifespan."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        # Every request must carry a parley bearer token, which a page that rebinds DNS to
        # this host cannot have; the SDK's Host/Origin check would only refuse proxies.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.managers: dict[str, StreamableHTTPSessionManager] = {}
        for profile in PROFILES:
            server = build_mcp(hub, profile)
            server.streamable_http_app(transport_security=security)
            self.managers[profile] = server.session_manager

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run every profile's session manager; leaving cancels the open MCP sessions."""
        async with AsyncExitStack() as stack:
            for manager in self.managers.values():
                await stack.enter_async_context(manager.run())
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            await _error(refusal, 404)(scope, receive, send)
            return
        token = bearer_token(request.headers)
        try:
            principal = await self.hub.identity.authenticate(token)
        except Unauthenticated as exc:
            await _error(exc, 401)(scope, receive, send)
            return
        assert token is not None
        # The SDK binds a session to the credential that opened it and answers any request
        # for that session with another credential as if the session did not exist.
        access = AccessToken(token=token, client_id=principal.id, scopes=[])
        scope_with_user: dict[str, Any] = {**scope, "user": AuthenticatedUser(access)}
        await manager.handle_request(scope_with_user, receive, send)
