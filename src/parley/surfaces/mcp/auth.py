"""Who is calling a tool: the one authentication path of the MCP surface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.turn_access import TurnBinding

if TYPE_CHECKING:
    # Annotation only: the REST guard imports bearer_token, and must not load the MCP SDK.
    from mcp.server.mcpserver import Context


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if there is one."""
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class Authenticator:
    """Turns the context of a tool call into the calling principal. Over HTTP the token is the
    bearer token of the request that carried the call; over stdio or in memory, where there
    are no headers, it is the token the server was built with."""

    def __init__(self, hub: Hub, token: str | None) -> None:
        self.hub = hub
        self.token = token

    async def __call__(self, ctx: Context[Any, Any]) -> Principal:
        return (await self.caller_and_turn(ctx))[0]

    async def caller_and_turn(self, ctx: Context[Any, Any]) -> tuple[Principal, TurnBinding | None]:
        """The caller, and the running turn the call comes from when its token is a turn
        token the hub gave a command-line agent (:mod:`parley.service.turn_access`)."""
        headers = ctx.headers
        # A call that came over HTTP is judged by its own header, never by a token the server
        # was started with: one hub serves many agents.
        token = bearer_token(headers) if headers is not None else self.token
        caller = await self.hub.identity.authenticate(token)
        return caller, self.hub.identity.turn_binding(token)
