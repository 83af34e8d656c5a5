"""MCP sessions over Streamable HTTP are counted per principal over every profile: one more than
a principal's limit closes its session idle longest (or is refused when all are busy), the last
places of the hub are the operator's, and a rotation of a principal's tokens ends its sessions.
Raw HTTP opens the sessions here, so that a test decides which of them are idle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.routing import Route
from starlette.types import Message

from parley.config import Settings
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.identity import revocation_topic
from parley.surfaces.mcp.http import McpEndpoint
from parley.surfaces.rest.app import create_app
from parley.testing import FakeClock
from tests.conftest import MakeAgent
from tests.integration.mcp_support import INITIALIZE, MCP_HEADERS, http_client, serving, until

LIMITS = {
    "mcp_sessions_per_principal": 3,
    "mcp_sessions_max": 8,
    "mcp_sessions_operator_reserve": 2,
}
VERSION = "2025-06-18"
READ_TIMEOUT_S = 30.0  # a hang guard only


@pytest.fixture
def limits() -> dict[str, int]:
    return LIMITS


@pytest.fixture
def settings(settings: Settings, limits: dict[str, int]) -> Settings:
    return settings.model_copy(update=limits)


class Mcp:
    """The hub's app served over HTTP, and its MCP endpoint (to read the count of sessions)."""

    def __init__(self, base: str, endpoint: McpEndpoint) -> None:
        self.url = f"{base}/mcp"
        self.endpoint = endpoint
        self.http = httpx2.AsyncClient(timeout=READ_TIMEOUT_S)

    def held(self, principal_id: str) -> int:
        return self.endpoint.sessions.held(principal_id)

    async def initialize(self, token: str, profile: str | None = None) -> httpx2.Response:
        url = self.url if profile is None else f"{self.url}?profile={profile}"
        return await self.http.post(url, json=INITIALIZE, headers=self.headers(token))

    async def open(self, token: str, profile: str | None = None) -> str:
        """A new session, left idle; its id."""
        response = await self.initialize(token, profile)
        assert response.status_code == 200, response.text
        return str(response.headers["mcp-session-id"])

    async def ping(self, token: str, session: str, profile: str | None = None) -> int:
        """The status a ``ping`` in ``session`` is answered with: 200, or 404 once it ended."""
        url = self.url if profile is None else f"{self.url}?profile={profile}"
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        response = await self.http.post(url, json=ping, headers=self.headers(token, session))
        return response.status_code

    def headers(self, token: str, session: str | None = None) -> dict[str, str]:
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        if session is not None:
            headers |= {"mcp-session-id": session, "mcp-protocol-version": VERSION}
        return headers

    async def busy(self, token: str, session: str) -> httpx2.Response:
        """Open the session's event stream, a request that stays in flight until closed."""
        headers = {
            "Accept": "text/event-stream",
            "Authorization": f"Bearer {token}",
            "mcp-session-id": session,
            "mcp-protocol-version": VERSION,
        }
        request = self.http.build_request("GET", self.url, headers=headers)
        response = await self.http.send(request, stream=True)
        assert response.status_code == 200, await response.aread()
        return response


@pytest.fixture
async def mcp(hub: Hub) -> AsyncIterator[Mcp]:
    app = create_app(hub=hub)
    (endpoint,) = [r.endpoint for r in app.routes if isinstance(r, Route) and r.path == "/mcp"]
    assert isinstance(endpoint, McpEndpoint)
    async with serving(app) as base:
        client = Mcp(base, endpoint)
        try:
            yield client
        finally:
            await client.http.aclose()


def subscribers(hub: Hub, topic: str) -> int:
    bus: Any = hub.bus
    return int(bus.subscriber_count(topic))


def test_defaults_are_16_a_principal_and_1024_with_32_for_the_operator() -> None:
    fields = Settings.model_fields
    assert fields["mcp_sessions_per_principal"].default == 16
    assert fields["mcp_sessions_max"].default == 1024
    assert fields["mcp_sessions_operator_reserve"].default == 32
    assert fields["mcp_session_idle_s"].default == 1800
    with pytest.raises(ValueError, match="mcp_sessions_operator_reserve"):
        Settings(mcp_sessions_max=8, mcp_sessions_operator_reserve=8)


async def test_one_more_session_closes_the_principals_session_idle_longest(
    mcp: Mcp, make_agent: MakeAgent, hub: Hub
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    # Counted over every profile together.
    oldest = await mcp.open(alice.token, "mail")
    used = await mcp.open(alice.token)
    newest = await mcp.open(alice.token, "rooms")
    assert await mcp.ping(alice.token, used) == 200  # now the one used last
    assert mcp.held("alice") == 3

    fourth = await mcp.open(alice.token, "workers")

    assert await mcp.ping(alice.token, oldest, "mail") == 404
    assert mcp.held("alice") == 3
    # Used in this order, the first is now the one idle longest, though opened after another.
    for session, profile in ((newest, "rooms"), (fourth, "workers"), (used, None)):
        assert await mcp.ping(alice.token, session, profile) == 200
    await mcp.open(alice.token)
    assert await mcp.ping(alice.token, newest, "rooms") == 404
    assert await mcp.ping(alice.token, used) == 200
    assert await mcp.ping(alice.token, fourth, "workers") == 200
    # Nobody else lost a thing: another agent and the operator open sessions as before.
    assert hub.operator_token is not None
    for principal_id, token in (("bob", bob.token), ("operator", hub.operator_token)):
        async with http_client(mcp.url, token, mode="legacy") as client:
            assert (await client.call_tool("whoami", {})).is_error is False
            assert mcp.held(principal_id) == 1
    assert mcp.held("alice") == 3


async def test_when_every_session_is_busy_one_more_is_refused(
    mcp: Mcp, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    sessions = [await mcp.open(alice.token) for _ in range(3)]
    streams = [await mcp.busy(alice.token, session) for session in sessions]
    try:
        refused = await mcp.initialize(alice.token, "mail")
        assert refused.status_code == 429
        assert "mcp-session-id" not in refused.headers
        assert refused.headers["retry-after"] == "1"
        body = refused.json()
        assert body["code"] == "mcp_sessions_exhausted"
        assert body["details"]["limit"] == 3
        message = body["message"]
        assert "'alice' already holds 3 MCP sessions, each with a request in flight" in message
        assert "PARLEY_MCP_SESSIONS_PER_PRINCIPAL" in message
        # None of the busy sessions was closed to make room.
        for session in sessions:
            assert await mcp.ping(alice.token, session) == 200
        assert mcp.held("alice") == 3
    finally:
        for stream in streams:
            await stream.aclose()
    # Once a request ends, its session is idle, and one more opens in exchange for it.
    await until(
        lambda: not any(s.in_flight for s in mcp.endpoint.sessions.sessions_of("alice")),
        "the streams have ended",
    )
    await mcp.open(alice.token)
    assert mcp.held("alice") == 3


async def test_one_agent_opening_sessions_at_once_keeps_no_more_than_its_limit(
    mcp: Mcp, make_agent: MakeAgent, hub: Hub
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    answers = await asyncio.gather(*(mcp.initialize(alice.token) for _ in range(24)))
    # Each one closed an idle one, or was refused while all were still opening.
    assert {a.status_code for a in answers} <= {200, 429}
    opened = [a.headers["mcp-session-id"] for a in answers if a.status_code == 200]
    assert len(opened) >= 3
    alive = [s for s in opened if await mcp.ping(alice.token, s) == 200]
    assert len(alive) == 3
    assert mcp.held("alice") == mcp.endpoint.sessions.total == 3
    assert hub.operator_token is not None
    await mcp.open(bob.token)
    await mcp.open(hub.operator_token)


@pytest.mark.parametrize(
    "limits",
    [{"mcp_sessions_per_principal": 6, "mcp_sessions_max": 8, "mcp_sessions_operator_reserve": 2}],
)
async def test_the_last_places_are_the_operators(mcp: Mcp, make_agent: MakeAgent, hub: Hub) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    for _ in range(6):
        await mcp.open(alice.token)

    refused = await mcp.initialize(bob.token)
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "mcp_sessions_hub_full"
    assert body["details"]["limit"] == 6
    assert "'bob' has no idle session to close in exchange" in body["message"]
    assert "PARLEY_MCP_SESSIONS_MAX" in body["message"]

    assert hub.operator_token is not None
    first = await mcp.open(hub.operator_token)
    async with http_client(mcp.url, hub.operator_token, mode="legacy") as client:
        assert (await client.call_tool("whoami", {})).is_error is False
        assert mcp.endpoint.sessions.total == 8
        # Alice, with a session of her own to give up, opens one more in its place.
        await mcp.open(alice.token)
        assert mcp.held("alice") == 6
        # The hub is full: the operator's own idle session makes room for its next one.
        await mcp.open(hub.operator_token)
        assert await mcp.ping(hub.operator_token, first) == 404
    assert (await mcp.initialize(bob.token)).status_code == 429


async def test_rotating_a_token_ends_the_principals_sessions(
    mcp: Mcp, make_agent: MakeAgent, hub: Hub, operator: Principal
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    sessions = [await mcp.open(alice.token, profile) for profile in ("mail", None, None)]
    stream = await mcp.busy(alice.token, sessions[2])
    kept = await mcp.open(bob.token)
    try:
        new_token = await hub.identity.issue_token(operator, "alice", rotate=True)
        await until(lambda: mcp.held("alice") == 0, "the sessions are let go")
        await until(lambda: subscribers(hub, revocation_topic("alice")) == 0, "they ended")
    finally:
        await stream.aclose()
    # The principal's new token does not revive them: they have ended.
    for session, profile in zip(sessions, ("mail", None, None), strict=True):
        assert await mcp.ping(new_token, session, profile) == 404
    assert await mcp.ping(bob.token, kept) == 200
    assert mcp.endpoint.sessions.total == 1  # Bob's
    assert await mcp.ping(new_token, await mcp.open(new_token)) == 200


async def test_a_session_opened_with_the_new_token_outlives_the_rotation(
    mcp: Mcp, make_agent: MakeAgent, hub: Hub, operator: Principal
) -> None:
    """Only sessions opened with a revoked token end, even if the notice comes late."""
    await make_agent("alice")
    spare = await hub.identity.issue_token(operator, "alice", rotate=False)
    old = await mcp.open(spare)
    bus: Any = hub.bus
    # Held back: the notice arrives after a session was opened with the new token.
    publish = bus.publish
    notices: list[tuple[str, dict[str, Any]]] = []

    async def hold(topic: str, data: dict[str, Any]) -> None:
        notices.append((topic, data))

    bus.publish = hold
    try:
        new_token = await hub.identity.issue_token(operator, "alice", rotate=True)
    finally:
        bus.publish = publish
    new = await mcp.open(new_token)
    for topic, data in notices:
        await publish(topic, data)
    await until(lambda: mcp.held("alice") == 1, "the old session is let go")
    await until(lambda: subscribers(hub, revocation_topic("alice")) == 1, "it ended")
    assert await mcp.ping(new_token, old) == 404
    assert await mcp.ping(new_token, new) == 200


async def test_a_closed_or_idle_session_gives_back_its_place(
    mcp: Mcp, make_agent: MakeAgent, hub: Hub, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    closed, idle, busy = [await mcp.open(alice.token) for _ in range(3)]
    # The client ends one itself.
    deleted = await mcp.http.delete(mcp.url, headers=mcp.headers(alice.token, closed))
    assert deleted.status_code == 200
    assert mcp.held("alice") == 2
    stream = await mcp.busy(alice.token, busy)
    try:
        clock.advance(hub.settings.mcp_session_idle_s)
        assert await mcp.endpoint.end_idle_sessions() == 1
        assert mcp.held("alice") == 1
        assert await mcp.ping(alice.token, idle) == 404
        assert await mcp.ping(alice.token, busy) == 200
    finally:
        await stream.aclose()
    assert await mcp.endpoint.end_idle_sessions() == 0  # idle only from now on
    assert mcp.held("alice") == 1


async def test_a_session_the_sdk_ended_gives_back_its_place_when_next_used(
    mcp: Mcp, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    session = await mcp.open(alice.token)
    # Ended behind the count's back, as the SDK's own idle timeout would.
    manager = mcp.endpoint.managers["default"]
    answer: list[int] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.append(message["status"])

    scope = {
        "type": "http",
        "method": "DELETE",
        "path": "/mcp",
        "query_string": b"",
        "headers": [(b"mcp-session-id", session.encode())],
        "user": AuthenticatedUser(AccessToken(token="", client_id="alice", scopes=[])),
    }
    await manager.handle_request(scope, receive, send)
    assert answer == [200]
    assert mcp.held("alice") == 1
    assert await mcp.ping(alice.token, session) == 404
    assert mcp.held("alice") == 0


async def test_a_rotation_on_another_hub_ends_the_sessions_here(
    mcp: Mcp,
    make_agent: MakeAgent,
    hub: Hub,
    settings: Settings,
    postgres_only: None,
    clock: FakeClock,
) -> None:
    from parley.bootstrap import build_hub

    alice = await make_agent("alice")
    sessions = [await mcp.open(alice.token) for _ in range(2)]
    other = build_hub(settings, clock=clock)
    await other.start(background=False)
    try:
        assert hub.operator_token is not None
        operator = await other.identity.authenticate(hub.operator_token)
        heard = hub.bus.subscribe([revocation_topic("alice")])
        try:
            new_token = await other.identity.issue_token(operator, "alice", rotate=True)
            async with asyncio.timeout(READ_TIMEOUT_S):
                await heard.get()
        finally:
            await heard.close()
        await until(lambda: mcp.held("alice") == 0, "the sessions are let go")
        await until(lambda: subscribers(hub, revocation_topic("alice")) == 0, "they ended")
    finally:
        await other.stop()
    for session in sessions:
        assert await mcp.ping(new_token, session) == 404
