"""``parley mcp``: the MCP server over stdio, for agents that start their MCP servers as
subprocesses (Claude Code, Codex, Gemini CLI).

With a hub URL (``--url`` or ``PARLEY_URL``) it relays every request to that hub's ``/mcp``
with the agent's token, so the hub's service layer enforces every rule and the tools are
exactly the hub's. Without one it serves an embedded hub on the local data root. Either way
the agent's token comes from ``PARLEY_TOKEN``. Nothing but MCP messages is written to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any
from urllib.parse import urlencode

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams

from parley import __version__
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import ConfigError, ParleyError
from parley.service.mail.mailbox import MAX_WAIT_S
from parley.surfaces.mcp.server import INSTRUCTIONS, PROFILES, build_mcp

NO_TOKEN = (
    "no agent token: set PARLEY_TOKEN to the token the operator issued for this agent "
    "(e.g. in the MCP server's env in your client's configuration)"
)


def hub_base(hub_url: str) -> str:
    """The hub's base URL, whether given as such or as its /mcp endpoint."""
    base = hub_url.rstrip("/")
    return base[: -len("/mcp")] if base.endswith("/mcp") else base


def mcp_url(hub_url: str, profile: str) -> str:
    """The hub's MCP endpoint for ``profile``, from the hub's base URL (or its /mcp URL)."""
    endpoint = f"{hub_base(hub_url)}/mcp"
    return endpoint if profile == "default" else f"{endpoint}?{urlencode({'profile': profile})}"


def relay_server(upstream: Client) -> Server[Any]:
    """A stdio-facing server whose every tool call is answered by the hub behind
    ``upstream``."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return await upstream.list_tools(cursor=params.cursor if params else None)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        return await upstream.call_tool(params.name, params.arguments)

    return Server(
        "parley",
        version=__version__,
        title="parley",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def check_hub(http: httpx2.AsyncClient, hub_url: str) -> None:
    """Refuse to start when the hub is unreachable or refuses the token, with the hub's own
    reason: a relay that started anyway would fail every call without saying why."""
    try:
        response = await http.get(f"{hub_base(hub_url)}/v1/whoami")
    except httpx2.HTTPError as exc:
        raise ConfigError(
            f"cannot reach the hub at {hub_url!r} ({exc}); start it with 'parley serve' or "
            "correct PARLEY_URL",
            code="hub_unreachable",
        ) from exc
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = {}
        raise ParleyError(
            str(body.get("message") or f"the hub answered HTTP {response.status_code}"),
            code=str(body.get("code") or "hub_refused"),
        )


async def relay(hub_url: str, token: str, profile: str) -> None:
    """Serve stdio by relaying to a running hub."""
    # Long enough for the longest wait_for_mail the hub accepts.
    timeout = httpx2.Timeout(30.0, read=MAX_WAIT_S + 60.0)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        await check_hub(http, hub_url)
        transport = streamable_http_client(mcp_url(hub_url, profile), http_client=http)
        async with Client(transport) as upstream:
            server = relay_server(upstream)
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())


async def embedded(settings: Settings, token: str, profile: str) -> None:
    """Serve stdio from a hub started in this process."""
    hub = build_hub(settings)
    await hub.start()
    try:
        # Refuse a bad token now, while the client still shows this process's error output.
        await hub.identity.authenticate(token)
        await build_mcp(hub, profile, token=token).run_stdio_async()
    finally:
        await hub.stop()


async def serve_stdio(
    *,
    url: str | None = None,
    token: str | None = None,
    profile: str = "default",
    settings: Settings | None = None,
) -> None:
    """Serve MCP on stdio: relay to the hub at ``url`` (default ``PARLEY_URL``), or serve an
    embedded hub when none is configured. ``token`` defaults to ``PARLEY_TOKEN``."""
    url = url or os.environ.get("PARLEY_URL") or None
    token = token or os.environ.get("PARLEY_TOKEN") or None
    if profile not in PROFILES:
        raise ConfigError(
            f"MCP profile {profile!r} is unknown; use one of {', '.join(PROFILES)}",
            code="unknown_profile",
        )
    if token is None:
        raise ConfigError(NO_TOKEN, code="no_token")
    if url is not None:
        await relay(url, token, profile)
    else:
        await embedded(settings or Settings(), token, profile)


def run_stdio(
    *,
    url: str | None = None,
    token: str | None = None,
    profile: str = "default",
    settings: Settings | None = None,
) -> int:
    """Run :func:`serve_stdio` until the client closes stdin; returns the exit status. A
    configuration problem is reported on stderr (the client shows it), never on stdout."""
    try:
        asyncio.run(serve_stdio(url=url, token=token, profile=profile, settings=settings))
    except ParleyError as exc:
        print(f"parley mcp: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m parley.surfaces.mcp.stdio",
        description="parley's MCP server over stdio; the agent's token comes from PARLEY_TOKEN.",
    )
    parser.add_argument("--url", help="a running hub to relay to (default: PARLEY_URL)")
    parser.add_argument("--profile", default="default", choices=sorted(PROFILES))
    args = parser.parse_args(argv)
    return run_stdio(url=args.url, profile=args.profile)


if __name__ == "__main__":
    sys.exit(main())
