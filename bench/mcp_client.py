"""An MCP client session for the bench scripts (``mcp_wake.py``, ``compare.py``): the official
SDK over Streamable HTTP."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@contextlib.asynccontextmanager
async def mcp_session(url: str, token: str, read_timeout_s: float = 60.0) -> AsyncIterator[Client]:
    """A connected MCP client of the hub at ``url`` acting with ``token``."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30.0, read=read_timeout_s)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def result_data(result: Any) -> dict[str, Any]:
    """A tool result's JSON; a refusal raises."""
    if result.is_error:
        raise RuntimeError(f"tool call refused: {result.content[0].text}")
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data
