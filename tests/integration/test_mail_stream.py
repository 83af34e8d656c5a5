"""The live inbox stream (M5 push, M6 resumable delivery) against a real HTTP server."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn

from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent, free_port
from tests.integration.mail_support import send

READ_TIMEOUT_S = 20.0
START_TIMEOUT_S = 20.0


class _Server(uvicorn.Server):
    """A uvicorn server that signals once it is listening."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.listening.set()


@asynccontextmanager
async def serving(hub: Hub) -> AsyncIterator[str]:
    """A uvicorn server for the hub on a free loopback port, in this event loop."""
    port = free_port()
    config = uvicorn.Config(
        create_app(hub=hub),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    try:
        listening = asyncio.create_task(server.listening.wait())
        done, _ = await asyncio.wait(
            {task, listening}, timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if listening not in done:
            listening.cancel()
            raise AssertionError(
                f"the server did not start: {task.exception() if task.done() else 'timeout'}"
            )
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


class SseReader:
    """Reads ``mail`` events from an open event-stream response."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()

    async def next(self) -> tuple[int, dict[str, Any]]:
        event: dict[str, str] = {}
        async with asyncio.timeout(READ_TIMEOUT_S):
            async for line in self.lines:
                if line == "":
                    if event.get("event") == "mail":
                        return int(event["id"]), json.loads(event["data"])
                    event = {}
                    continue
                if line.startswith(":"):
                    continue  # keep-alive comment
                key, _, value = line.partition(":")
                event[key] = value.removeprefix(" ")
        raise AssertionError("the stream ended")


async def test_the_inbox_stream_pushes_new_mail_and_resumes_after_a_seq(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    before = [await send(hub, alice.principal, "bob", body=f"m{i}") for i in (1, 2)]
    async with serving(hub) as url:
        headers = {"Authorization": f"Bearer {bob.token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            async with client.stream("GET", "/v1/agents/bob/inbox/stream") as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                reader = SseReader(response)
                got = [await reader.next(), await reader.next()]
                assert [(seq, data["id"]) for seq, data in got] == [
                    (1, before[0].id),
                    (2, before[1].id),
                ]
                # Sent while connected: pushed live.
                live = await send(hub, alice.principal, "bob", body="m3")
                seq, data = await reader.next()
                assert (seq, data["id"], data["body"]) == (3, live.id, "m3")

            # Sent while nobody listens; a reconnect after seq 2 replays exactly 3, 4 and 5.
            offline = [await send(hub, alice.principal, "bob", body=f"m{i}") for i in (4, 5)]
            resume = {"Last-Event-ID": "2"}
            async with client.stream(
                "GET", "/v1/agents/bob/inbox/stream", headers=resume
            ) as response:
                reader = SseReader(response)
                replayed = [await reader.next() for _ in range(3)]
                assert [(s, d["body"]) for s, d in replayed] == [(3, "m3"), (4, "m4"), (5, "m5")]
                assert [d["id"] for _, d in replayed[1:]] == [m.id for m in offline]
                after = await send(hub, alice.principal, "bob", body="m6")
                # The next event is the new message: nothing from before seq 2 came back,
                # and nothing replayed came twice.
                seq, data = await reader.next()
                assert (seq, data["id"]) == (6, after.id)


async def test_the_stream_is_only_for_the_owner_and_the_operator(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    await send(hub, alice.principal, "bob", body="for bob")
    async with serving(hub) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.get(
            "/v1/agents/bob/inbox/stream", headers={"Authorization": f"Bearer {alice.token}"}
        )
        assert (r.status_code, r.json()["code"]) == (403, "inbox_forbidden")
        r = await client.get("/v1/agents/bob/inbox/stream")
        assert (r.status_code, r.json()["code"]) == (401, "missing_token")
        assert hub.operator_token is not None
        op = {"Authorization": f"Bearer {hub.operator_token}"}
        async with client.stream("GET", "/v1/agents/bob/inbox/stream", headers=op) as response:
            seq, data = await SseReader(response).next()
            assert (seq, data["body"]) == (1, "for bob")


@pytest.mark.parametrize("query", [True, False])
async def test_a_browser_can_resume_with_a_query_token(
    query: bool, hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    for i in (1, 2, 3):
        await send(hub, alice.principal, "bob", body=f"m{i}")
    async with serving(hub) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        if query:
            params = {"token": bob.token, "last_id": "1"}
            kwargs: dict[str, Any] = {"params": params}
        else:
            kwargs = {"headers": {"Authorization": f"Bearer {bob.token}", "Last-Event-ID": "1"}}
        async with client.stream("GET", "/v1/agents/bob/inbox/stream", **kwargs) as response:
            reader = SseReader(response)
            assert [(await reader.next())[0] for _ in range(2)] == [2, 3]
