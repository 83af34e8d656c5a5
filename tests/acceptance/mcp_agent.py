"""What the remote agent scripts (``remote_agent.py``, ``meeting_member.py``,
``worker_child.py``) share: an MCP client over Streamable HTTP with the agent's own token, tool
calls that raise on a refusal, waiting for a turn, and one JSON line on stdout per step.

The scripts run as their own processes, with this directory first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

WAIT_S = 60.0
MAX_WAITS = 5


class ProtocolBroken(Exception):
    """The hub did not do what the tools promise; the script stops with status 1."""


class ToolRefused(Exception):
    """The hub refused a call; ``code`` is its stable error code."""

    def __init__(self, tool: str, code: str, message: str) -> None:
        super().__init__(f"{tool}: {code}: {message}")
        self.code = code


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


@asynccontextmanager
async def connect(url: str, token: str, profile: str | None = None) -> AsyncIterator[Client]:
    """An MCP session with the hub at ``url`` as the agent of ``token`` (a tool ``profile``, or
    the default one)."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30.0, read=WAIT_S + 30.0)
    endpoint = f"{url}/mcp" if profile is None else f"{url}/mcp?profile={profile}"
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(endpoint, http_client=http)) as client,
    ):
        yield client


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        body = result.structured_content or {}
        raise ToolRefused(tool, str(body.get("code")), str(body.get("message")))
    data: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return data


async def next_turn(client: Client, *, waits: int = MAX_WAITS) -> dict[str, Any]:
    """The next turn; a meeting or a dispatch may take a while to reach the agent, so wait up to
    ``waits`` times."""
    for _ in range(waits):
        turn = await call(client, "wait_for_turn", timeout_s=WAIT_S)
        if not turn.get("timed_out"):
            return turn
    within = f"{waits} waits of {WAIT_S:g}s" if waits > 1 else f"{WAIT_S:g}s"
    raise ProtocolBroken(f"no turn came within {within}")


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """The script's command line: ``--url`` of the hub; the script adds its own options."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n", 1)[0])
    parser.add_argument("--url", required=True, help="the hub's base URL")
    return parser


def run_agent(protocol: Coroutine[Any, Any, None]) -> int:
    """Run the script's protocol to its end (status 0); a broken promise or a refusal ends it
    with one ``failed`` line and status 1."""
    try:
        asyncio.run(protocol)
    except (ProtocolBroken, ToolRefused) as exc:
        emit("failed", error=str(exc))
        return 1
    return 0
