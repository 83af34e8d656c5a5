"""A token in the URL (``?token=``) is taken by the event streams only, matched by their route
templates, not by a path that happens to end in ``/stream``."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from starlette.routing import compile_path

from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.workers.records import StartSpec
from parley.surfaces.rest.app import create_app
from parley.surfaces.rest.deps import STREAM_ROUTES
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.mcp_support import serving
from tests.integration.meeting_support import members, room_with

Api = Callable[[str | None], httpx.AsyncClient]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/v1/tasks/stream"),
        ("GET", "/v1/tasks/stream"),
        ("GET", "/v1/mail/stream"),
        ("GET", "/v1/agents/stream"),
        ("GET", "/v1/channels/stream"),
        ("GET", "/v1/whoami"),
    ],
)
async def test_a_query_token_does_not_authenticate_other_routes(
    method: str, path: str, api: Api, hub: Hub
) -> None:
    assert hub.operator_token is not None
    response = await api(None).request(method, path, params={"token": hub.operator_token})
    assert response.status_code == 401, response.text
    assert response.json()["code"] in {"unauthenticated", "missing_token"}


async def test_each_event_stream_takes_a_query_token(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    bob = await make_agent("bob")
    channel = await hub.channels.create(operator, ChannelSpec(name="room", members=["bob"]))
    await members(make_agent, runtimes, ["m1", "m2"])
    room = await room_with(hub, operator, ["m1", "m2"])
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await hub.meetings.wait_idle()
    worker = await hub.workers.start(operator, StartSpec(agent_id="bob", prompt="index it"))
    assert hub.operator_token is not None
    paths = {
        "/v1/agents/{owner}/inbox/stream": "/v1/agents/bob/inbox/stream",
        "/v1/channels/{channel_id}/stream": f"/v1/channels/{channel.id}/stream",
        "/v1/events/stream": "/v1/events/stream",
        "/v1/rooms/meetings/{meeting_id}/stream": f"/v1/rooms/meetings/{meeting.id}/stream",
        "/v1/workers/{worker_id}/stream": f"/v1/workers/{worker.id}/stream",
    }
    assert set(paths) == STREAM_ROUTES
    async with serving(create_app(hub=hub)) as url, httpx.AsyncClient(base_url=url) as client:
        for template, path in paths.items():
            operator_only = template in (
                "/v1/events/stream",
                "/v1/rooms/meetings/{meeting_id}/stream",
            )
            token = hub.operator_token if operator_only else bob.token
            async with client.stream("GET", path, params={"token": token}) as response:
                assert response.status_code == 200, template
                assert response.headers["content-type"].startswith("text/event-stream")


def test_the_stream_routes_are_the_event_stream_routes(hub: Hub) -> None:
    """The routes that may take ``?token=`` are exactly those that answer with events."""
    paths = create_app(hub=hub).openapi()["paths"]
    streams = {
        path
        for path, operations in paths.items()
        if "text/event-stream"
        in operations.get("get", {}).get("responses", {}).get("200", {}).get("content", {})
    }
    assert streams == STREAM_ROUTES


@pytest.mark.parametrize("fill", ["x", "stream"])
def test_no_other_get_route_shares_a_path_with_an_event_stream(hub: Hub, fill: str) -> None:
    """The guard takes ``?token=`` by the stream templates, before routing: a path one of them
    matches must not be one that another GET route could answer too."""
    paths = create_app(hub=hub).openapi()["paths"]
    others = [t for t, ops in paths.items() if "get" in ops and t not in STREAM_ROUTES]
    assert others, "the OpenAPI document lists the GET routes"
    streams = [compile_path(t)[0] for t in STREAM_ROUTES]
    for template in others:
        assert not any(s.fullmatch(re.sub(r"\{[^}]+\}", fill, template)) for s in streams)
        other = compile_path(template)[0]
        for stream in STREAM_ROUTES:
            assert not other.fullmatch(re.sub(r"\{[^}]+\}", fill, stream)), (template, stream)
