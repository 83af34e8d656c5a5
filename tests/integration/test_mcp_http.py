"""S3 over real Streamable HTTP: the hub's app served by uvicorn, the SDK client sending the
agent's bearer token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2
import pytest

from parley.service.hub import Hub
from parley.surfaces.mcp import PROFILES
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent
from tests.integration.mcp_support import (
    INITIALIZE,
    MCP_HEADERS,
    data,
    http_client,
    refusal,
    serving,
    waiting_on_inbox,
)


@pytest.fixture
async def mcp_url(hub: Hub) -> AsyncIterator[str]:
    async with serving(create_app(hub=hub)) as base:
        yield f"{base}/mcp"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_call_speaks_as_the_owner_of_its_token(
    mcp_url: str, make_agent: MakeAgent, mode: str
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with (
        http_client(mcp_url, alice.token, mode=mode) as a,
        http_client(mcp_url, bob.token, mode=mode) as b,
    ):
        assert [t.name for t in (await a.list_tools()).tools] == list(PROFILES["default"])
        assert data(await a.call_tool("whoami", {}))["id"] == "alice"
        assert data(await b.call_tool("whoami", {}))["id"] == "bob"
        sent = data(
            await a.call_tool(
                "send_message", {"to": "bob", "kind": "task", "subject": "hi", "body": "x"}
            )
        )
        assert sent["from_id"] == "alice"
        inbox = data(await b.call_tool("check_inbox", {}))
        assert [m["id"] for m in inbox["messages"]] == [sent["id"]]
        # Over HTTP too a refusal carries the REST code.
        mine = await a.call_tool("check_inbox", {})
        assert data(mine)["messages"] == []
        carol = await a.call_tool("update_message", {"id": sent["id"], "status": "read"})
        assert refusal(carol)["code"] == "not_recipient"


async def test_the_profile_is_chosen_by_query_parameter(
    mcp_url: str, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    async with http_client(f"{mcp_url}?profile=mail", alice.token) as client:
        assert [t.name for t in (await client.list_tools()).tools] == list(PROFILES["mail"])
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice.token}"}) as http:
        r = await http.post(f"{mcp_url}?profile=gossip", json=INITIALIZE, headers=MCP_HEADERS)
        combined = await http.post(
            f"{mcp_url}?profile=default,workers", json=INITIALIZE, headers=MCP_HEADERS
        )
    assert r.status_code == 404
    assert r.json()["code"] == "unknown_profile"
    assert r.json()["details"]["profiles"] == list(PROFILES)
    assert combined.json()["code"] == "unknown_profile"
    assert "one MCP server entry per profile" in combined.json()["message"]


@pytest.mark.parametrize("authorization", [None, "Bearer pt_wrong", "Basic YWxpY2U6eA=="])
async def test_a_request_without_a_valid_token_is_refused_before_any_session(
    mcp_url: str, make_agent: MakeAgent, authorization: str | None
) -> None:
    await make_agent("alice")
    headers = dict(MCP_HEADERS)
    if authorization:
        headers["Authorization"] = authorization
    async with httpx2.AsyncClient() as http:
        r = await http.post(mcp_url, json=INITIALIZE, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith('Bearer realm="parley"')
    assert r.json()["code"] == (
        "invalid_token" if authorization == "Bearer pt_wrong" else "missing_token"
    )
    assert "mcp-session-id" not in r.headers


async def test_a_session_cannot_be_used_with_another_agents_token(
    mcp_url: str, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with httpx2.AsyncClient() as http:
        opened = await http.post(
            mcp_url,
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {alice.token}"},
        )
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}},
        }
        hijack = await http.post(
            mcp_url,
            json=call,
            headers={
                **MCP_HEADERS,
                "Authorization": f"Bearer {bob.token}",
                "mcp-session-id": session,
                "mcp-protocol-version": "2025-06-18",
            },
        )
        assert hijack.status_code == 404
        await http.delete(
            mcp_url,
            headers={"Authorization": f"Bearer {alice.token}", "mcp-session-id": session},
        )


async def test_wait_for_mail_over_http_wakes_when_mail_arrives(
    mcp_url: str, make_agent: MakeAgent, hub: Hub
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with (
        http_client(mcp_url, alice.token) as a,
        http_client(f"{mcp_url}?profile=mail", bob.token) as b,
    ):
        waiting = asyncio.create_task(a.call_tool("wait_for_mail", {"timeout_s": 120}))
        await waiting_on_inbox(hub, "alice")
        sent = data(
            await b.call_tool(
                "send_message", {"to": "alice", "kind": "handoff", "subject": "yours", "body": "."}
            )
        )
        woke = data(await waiting)
        assert [m["id"] for m in woke["messages"]] == [sent["id"]]
        timed_out = data(await a.call_tool("wait_for_mail", {"timeout_s": 0.05}))
        assert timed_out["timed_out"] is True
