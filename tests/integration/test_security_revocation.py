"""Rotating a principal's tokens ends what it has open with the old token: event streams (the
inbox, a channel), a REST long poll and an MCP long poll over HTTP. Mail and posts that arrive
after the rotation never reach the old connection. Removing a member from a channel, or deleting
the channel, ends its streams of the channel the same way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from mcp_types import CallToolResult

from parley.core.errors import Unauthenticated
from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelPatch, ChannelSpec
from parley.service.conversations.turns import turns_topic
from parley.service.hub import Hub
from parley.service.identity import revocation_topic
from parley.service.mail.mailbox import inbox_topic
from parley.surfaces.rest import guard
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent
from tests.integration.mail_support import send
from tests.integration.mcp_support import http_client, refusal, serving, until, waiting_on_inbox

# Hang guards only: every wait below ends on an event long before these.
READ_TIMEOUT_S = 30.0
LONG_POLL_S = 120.0


@pytest.fixture
async def base_url(hub: Hub) -> AsyncIterator[str]:
    async with serving(create_app(hub=hub)) as url:
        yield url


class EventReader:
    """Reads the events of an open event stream, one at a time or until the hub ends it."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self) -> dict[str, Any] | None:
        event: dict[str, str] = {}
        async with asyncio.timeout(READ_TIMEOUT_S):
            async for line in self._lines:
                if line == "":
                    if event:
                        return {**event, "data": json.loads(event.get("data", "null"))}
                elif not line.startswith(":"):
                    key, _, value = line.partition(":")
                    event[key] = value.removeprefix(" ")
        return None

    async def to_end(self) -> list[dict[str, Any]]:
        events = []
        while (event := await self.next()) is not None:
            events.append(event)
        return events


def subscribers(hub: Hub, topic: str) -> int:
    bus: Any = hub.bus
    return int(bus.subscriber_count(topic))


async def rotate(hub: Hub, operator: Principal, principal_id: str) -> str:
    return await hub.identity.issue_token(operator, principal_id, rotate=True)


async def make_token(hub: Hub, operator: Principal, principal_id: str) -> str:
    return await hub.identity.issue_token(operator, principal_id, rotate=False)


def assert_ended_by_revocation(events: list[dict[str, Any]]) -> None:
    assert events, "the stream sent nothing"
    last = events[-1]
    assert last["event"] == "error", events
    assert last["data"]["code"] == "token_revoked"


async def test_rotation_ends_an_open_inbox_stream(
    hub: Hub, operator: Principal, make_agent: MakeAgent, base_url: str
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    await send(hub, alice.principal, "bob", body="before")
    headers = {"Authorization": f"Bearer {bob.token}"}
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=READ_TIMEOUT_S) as client,
        client.stream("GET", "/v1/agents/bob/inbox/stream", headers=headers) as response,
    ):
        assert response.status_code == 200
        reader = EventReader(response)
        first = await reader.next()
        assert first is not None and first["data"]["body"] == "before"
        new_token = await rotate(hub, operator, "bob")
        await send(hub, alice.principal, "bob", body="after the rotation")
        events = await reader.to_end()
    assert [e["event"] for e in events] == ["error"], events
    assert_ended_by_revocation(events)
    # The new token streams, and gets what the old stream did not.
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=READ_TIMEOUT_S) as client,
        client.stream(
            "GET", "/v1/agents/bob/inbox/stream", headers={"Authorization": f"Bearer {new_token}"}
        ) as response,
    ):
        assert response.status_code == 200
        async with asyncio.timeout(READ_TIMEOUT_S):
            async for line in response.aiter_lines():
                if "after the rotation" in line:
                    break


async def test_a_stream_ends_at_the_revocation_even_before_the_guard_hears_of_it(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    base_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guard hears revocations in a subscription of its own, which on a shared bus may be
    served after the stream's: here it never hears one, and the stream still ends at the
    rotation, before the mail sent after it."""
    monkeypatch.setattr(guard, "revocation_topic", lambda principal_id: "nobody-publishes-here")
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    await send(hub, alice.principal, "bob", body="before")
    headers = {"Authorization": f"Bearer {bob.token}"}
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=READ_TIMEOUT_S) as client,
        client.stream("GET", "/v1/agents/bob/inbox/stream", headers=headers) as response,
    ):
        reader = EventReader(response)
        first = await reader.next()
        assert first is not None and first["data"]["body"] == "before"
        await rotate(hub, operator, "bob")
        await send(hub, alice.principal, "bob", body="after the rotation")
        events = await reader.to_end()
    assert [e["event"] for e in events] == ["error"], events
    assert_ended_by_revocation(events)


async def test_rotation_ends_an_open_channel_stream(
    hub: Hub, operator: Principal, make_agent: MakeAgent, base_url: str
) -> None:
    await make_agent("bob")  # runtime none: posts only flow, no task runs
    channel = await hub.channels.create(operator, ChannelSpec(name="g", members=["bob"]))
    await hub.channels.post(operator, channel.id, "before")
    # The query-string form of the token is ended the same way.
    path = f"/v1/channels/{channel.id}/stream?token={(await make_token(hub, operator, 'bob'))}"
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=READ_TIMEOUT_S) as client,
        client.stream("GET", path) as response,
    ):
        assert response.status_code == 200
        reader = EventReader(response)
        first = await reader.next()
        assert first is not None and first["data"]["content"] == "before"
        await rotate(hub, operator, "bob")
        await hub.channels.post(operator, channel.id, "after the rotation")
        events = await reader.to_end()
    assert [e["event"] for e in events] == ["error"], events
    assert_ended_by_revocation(events)


async def test_rotation_ends_a_rest_long_poll_with_401(
    hub: Hub, operator: Principal, make_agent: MakeAgent, base_url: str
) -> None:
    bob = await make_agent("bob")
    headers = {"Authorization": f"Bearer {bob.token}"}
    async with httpx.AsyncClient(base_url=base_url, timeout=READ_TIMEOUT_S) as client:
        poll = asyncio.create_task(
            client.get(
                "/v1/agents/bob/inbox/wait", params={"timeout_s": LONG_POLL_S}, headers=headers
            )
        )
        await waiting_on_inbox(hub, "bob")
        await rotate(hub, operator, "bob")
        response = await poll
    assert response.status_code == 401
    assert response.json()["code"] == "token_revoked"
    assert "invalid_token" in response.headers["www-authenticate"]
    await until(lambda: subscribers(hub, inbox_topic("bob")) == 0, "the wait stops")


async def test_rotation_ends_an_mcp_long_poll(
    hub: Hub, operator: Principal, make_agent: MakeAgent, base_url: str
) -> None:
    bob = await make_agent("bob")
    async with http_client(f"{base_url}/mcp", bob.token) as client:
        call = asyncio.create_task(client.call_tool("wait_for_mail", {"timeout_s": LONG_POLL_S}))
        await waiting_on_inbox(hub, "bob")
        await rotate(hub, operator, "bob")
        async with asyncio.timeout(READ_TIMEOUT_S):
            (outcome,) = await asyncio.gather(call, return_exceptions=True)
        # The call fails one way or another (a tool error, or the transport's), never with
        # the result of a wait that went on.
        if isinstance(outcome, CallToolResult):
            assert refusal(outcome)["code"] == "token_revoked"
        else:
            assert isinstance(outcome, Exception), outcome
    # The wait itself has ended, not only its HTTP request.
    await until(lambda: subscribers(hub, inbox_topic("bob")) == 0, "the wait stops")
    await until(lambda: subscribers(hub, revocation_topic("bob")) == 0, "the request ends")


@pytest.mark.parametrize("wait", ["mail", "turn"])
async def test_rotation_ends_a_long_poll_in_the_service_layer(
    hub: Hub, operator: Principal, make_agent: MakeAgent, wait: str
) -> None:
    """Over MCP stdio, or an MCP session that outlives its HTTP request, the wait itself ends."""
    bob = await make_agent("bob")
    if wait == "mail":
        poll = asyncio.create_task(hub.mail.wait(bob.principal, LONG_POLL_S))
        topic = inbox_topic("bob")
    else:
        poll = asyncio.create_task(hub.turns.next(bob.principal, LONG_POLL_S))
        topic = turns_topic("bob")
    await until(lambda: subscribers(hub, topic) > 0, "the wait subscribes")
    await rotate(hub, operator, "bob")
    with pytest.raises(Unauthenticated) as refused:
        async with asyncio.timeout(READ_TIMEOUT_S):
            await poll
    assert refused.value.code == "token_revoked"


# -- a member removed, a channel deleted ----------------------------------------------------------
async def test_a_member_removed_from_a_channel_stops_receiving_its_stream(
    hub: Hub, operator: Principal, make_agent: MakeAgent, base_url: str
) -> None:
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    channel = await hub.channels.create(
        operator, ChannelSpec(name="g", members=["bob", "carol"], private=True)
    )
    await hub.channels.post(operator, channel.id, "before")
    path = f"/v1/channels/{channel.id}/stream"
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=READ_TIMEOUT_S) as client,
        client.stream("GET", path, headers={"Authorization": f"Bearer {bob.token}"}) as bobs,
        client.stream("GET", path, headers={"Authorization": f"Bearer {carol.token}"}) as carols,
    ):
        bob_reader, carol_reader = EventReader(bobs), EventReader(carols)
        for reader in (bob_reader, carol_reader):
            first = await reader.next()
            assert first is not None and first["data"]["content"] == "before"
        await hub.channels.update(operator, channel.id, ChannelPatch(members=["carol"]))
        await hub.channels.post(operator, channel.id, "after the removal")
        events = await bob_reader.to_end()
        # The members who stay go on receiving.
        while (event := await carol_reader.next()) is not None:
            if event["event"] == "message":
                assert event["data"]["content"] == "after the removal"
                break
    assert [e["event"] for e in events] == ["error"], events
    assert events[-1]["data"]["code"] == "channel_forbidden"


async def test_deleting_a_channel_ends_its_streams(
    hub: Hub, operator: Principal, make_agent: MakeAgent, base_url: str
) -> None:
    bob = await make_agent("bob")
    channel = await hub.channels.create(operator, ChannelSpec(name="g", members=["bob"]))
    await hub.channels.post(operator, channel.id, "before")
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=READ_TIMEOUT_S) as client,
        client.stream(
            "GET",
            f"/v1/channels/{channel.id}/stream",
            headers={"Authorization": f"Bearer {bob.token}"},
        ) as response,
    ):
        reader = EventReader(response)
        first = await reader.next()
        assert first is not None and first["data"]["content"] == "before"
        await hub.channels.delete(operator, channel.id)
        events = await reader.to_end()
    assert [e["event"] for e in events] == ["error"], events
    assert events[-1]["data"]["code"] == "channel_not_found"
