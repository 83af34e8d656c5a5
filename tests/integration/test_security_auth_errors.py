"""A 401 says what is wrong with the token, on REST and on ``/mcp``: the body's code is
``missing_token`` or ``invalid_token`` with a message that tells how to fix it, and the
``WWW-Authenticate`` header follows RFC 6750 (an MCP client shows little more than that)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent
from tests.integration.mcp_support import INITIALIZE, MCP_HEADERS, serving

# RFC 6750 section 3: auth-param values are quoted strings without '"' or '\'.
INVALID_CHALLENGE = re.compile(
    r'^Bearer realm="parley", error="invalid_token", '
    r'error_description="[\x20\x21\x23-\x5b\x5d-\x7e]+"$'
)


@pytest.fixture
async def base_url(hub: Hub) -> AsyncIterator[str]:
    async with serving(create_app(hub=hub)) as base:
        yield base


async def tokens(hub: Hub, operator: Principal, make_agent: MakeAgent) -> dict[str, str | None]:
    """One header value per kind of bad credential, with the code it must be refused with."""
    alice = await make_agent("alice")
    await hub.identity.issue_token(operator, "alice", rotate=True)  # alice.token is now revoked
    return {"missing": None, "unknown": "pt_not-a-token", "revoked": alice.token}


def check_refusal(r: httpx.Response, kind: str) -> None:
    assert r.status_code == 401, r.text
    body = r.json()
    challenge = r.headers["www-authenticate"]
    if kind == "missing":
        assert body["code"] == "missing_token"
        assert challenge == 'Bearer realm="parley"'  # no error= when no token was sent
    else:
        assert body["code"] == "invalid_token"
        assert INVALID_CHALLENGE.match(challenge), challenge
    assert "Authorization: Bearer <token>" in body["message"]
    assert "parley token issue" in body["message"]


@pytest.mark.parametrize("kind", ["missing", "unknown", "revoked"])
async def test_mcp_says_what_is_wrong_with_the_token(
    hub: Hub, operator: Principal, make_agent: MakeAgent, base_url: str, kind: str
) -> None:
    token = (await tokens(hub, operator, make_agent))[kind]
    headers = dict(MCP_HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(base_url=base_url) as client:
        r = await client.post("/mcp", json=INITIALIZE, headers=headers)
    check_refusal(r, kind)
    assert "mcp-session-id" not in r.headers


@pytest.mark.parametrize("kind", ["missing", "unknown", "revoked"])
async def test_rest_says_what_is_wrong_with_the_token(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any, kind: str
) -> None:
    token = (await tokens(hub, operator, make_agent))[kind]
    check_refusal(await api(token).get("/v1/whoami"), kind)
    check_refusal(await api(token).post("/v1/mail", json={"to": "alice", "kind": "task"}), kind)
