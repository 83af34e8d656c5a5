"""A fake CLI's MCP client: one tool call to the hub's MCP endpoint, with the URL and headers
the ``command`` runtime's preset handed the CLI (as the real CLIs use them).

Imported by the fake CLIs as a sibling module (they run as scripts from this directory).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def _call(
    url: str, headers: dict[str, str], name: str, arguments: dict[str, Any]
) -> tuple[bool, Any]:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool(name, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    if result.is_error:
        return False, text
    return True, json.loads(text)


def call_tool(
    url: str, headers: dict[str, str], name: str, arguments: dict[str, Any]
) -> tuple[bool, Any]:
    """(ok, the tool's JSON result) or (False, the refusal's text)."""
    try:
        return asyncio.run(_call(url, headers, name, arguments))
    except Exception as exc:  # a refused connection, a 401: the fake reports it
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]  # type: ignore[assignment]
        return False, f"{exc.__class__.__name__}: {exc} {_probe(url, headers)}"


def _probe(url: str, headers: dict[str, str]) -> str:
    """What the endpoint answers a bare ``initialize``: the reason behind a failed call."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    try:
        answer = httpx2.post(url, json=body, headers={**headers, **accept})
    except Exception as exc:
        return f"({exc.__class__.__name__})"
    return f"({answer.status_code} {answer.text[:300]})"
