"""Helpers shared by the MCP tests: calling tools, reading results, serving the hub's app."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from parley.service.hub import Hub
from parley.service.mail.mailbox import inbox_topic

# The first request of a raw MCP client over HTTP, for tests that speak the protocol by hand.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def data(result: CallToolResult) -> dict[str, Any]:
    """The JSON a successful tool call returned, checked against its structured content."""
    assert not result.is_error, result.content
    text = result.content[0].text  # type: ignore[union-attr]
    parsed: dict[str, Any] = json.loads(text)
    assert parsed == result.structured_content
    return parsed


def refusal(result: CallToolResult) -> dict[str, Any]:
    """The ``{code, message, details}`` of a refused tool call; the text leads with the code."""
    assert result.is_error, result.content
    body = result.structured_content
    assert body is not None and set(body) == {"code", "message", "details"}
    assert result.content[0].text == f"{body['code']}: {body['message']}"  # type: ignore[union-attr]
    return body


WAIT_S = 15.0


async def take_turn(client: Client) -> dict[str, Any]:
    """The caller's next turn (``wait_for_turn``), failing if none comes in time."""
    turn = data(await client.call_tool("wait_for_turn", {"timeout_s": WAIT_S}))
    assert "turn_id" in turn, turn
    return turn


async def notice_to_finish(client: Client) -> dict[str, Any]:
    """The inbox notice telling an initiator to finish, skipping the turn notices before it."""
    for _ in range(20):
        got = data(await client.call_tool("wait_for_mail", {"timeout_s": WAIT_S}))
        assert not got["timed_out"], "no notice to finish the discussion arrived"
        for msg in got["messages"]:
            if msg["payload"].get("next") == "discuss_callback":
                return dict(msg)
    raise AssertionError("no notice to finish the discussion among the mail")


async def until(condition: Callable[[], bool], what: str) -> None:
    """Yield to the event loop until ``condition`` holds, failing after a bounded number of
    turns instead of hanging."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def waiting_on_inbox(hub: Hub, agent_id: str) -> None:
    """Return once a long poll has subscribed to ``agent_id``'s inbox."""
    bus: Any = hub.bus
    await until(lambda: bus.subscriber_count(inbox_topic(agent_id)) > 0, f"{agent_id} waits")


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` (lifespan included) with uvicorn on a free loopback port; yields its base
    URL. The socket listens before the server starts, so early clients wait in the backlog."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, http="h11")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@asynccontextmanager
async def http_client(url: str, token: str | None, *, mode: str = "auto") -> AsyncIterator[Client]:
    """An SDK client over Streamable HTTP that sends ``token`` as its bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client
