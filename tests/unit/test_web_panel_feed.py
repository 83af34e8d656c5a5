"""A live panel shared by the streams of one viewer: a change that arrives while the panel renders
makes one more render, so the last state is always shown."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from parley.adapters.bus.memory import MemoryBus
from parley.surfaces.web.feeds import LiveStreams, Panel, Stream
from parley.surfaces.web.sessions import WebSessions

WAIT_S = 10.0  # a hang guard only


class Renders:
    """A panel's render that shows the state it read, and can be held while it runs."""

    def __init__(self) -> None:
        self.state = 0
        self.started = asyncio.Event()
        self.go = asyncio.Event()
        self.go.set()

    async def __call__(self) -> str:
        seen = self.state  # what the store says when the render reads it
        self.started.set()
        await self.go.wait()
        return f"<p>state {seen}</p>"


async def next_panel(stream: Stream) -> str:
    async with asyncio.timeout(WAIT_S):
        while not (events := stream.take_panels()):
            await stream.wake.wait()
            stream.wake.clear()
    return events[-1]["data"]


async def test_a_change_during_a_render_makes_one_more_render() -> None:
    bus = MemoryBus()
    sessions = WebSessions()
    _, session = sessions.open("alice", "digest")
    hub: Any = SimpleNamespace(bus=bus)
    live = LiveStreams(hub, sessions, per_session=4, per_principal=4, refresh_s=0)
    renders = Renders()
    viewer: Any = SimpleNamespace(principal=SimpleNamespace(id="alice"), session=session)
    panel = Panel("state", Panel.key_for(viewer, "state"), ("t",), renders)
    stream = Stream(viewer)
    live.join_panel(stream, panel)
    assert await next_panel(stream) == "<p>state 0</p>"

    renders.go.clear()
    renders.started.clear()
    renders.state = 1
    await bus.publish("t", {"type": "event"})
    async with asyncio.timeout(WAIT_S):
        await renders.started.wait()  # the render has read state 1 ...
    renders.state = 2  # ... and a change commits while it runs
    await bus.publish("t", {"type": "event"})
    renders.go.set()
    # The stream holds only the newest rendering it has not sent; the last state comes.
    while (shown := await next_panel(stream)) != "<p>state 2</p>":
        assert shown == "<p>state 1</p>"
    assert live.renders == 3
    await live.leave(stream)
    assert bus.subscriber_count("t") == 0  # nobody shows the panel: its feed is closed
