"""A live panel shared by the streams of one viewer: a change that arrives while the panel renders
makes one more render, so the last state is always shown; the panels of one principal take turns
to render, a few times a refresh interval in all."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from parley.adapters.bus.memory import MemoryBus
from parley.surfaces.web.feeds import PRINCIPAL_RENDERS, LiveStreams, Panel, Stream
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


async def test_the_panels_of_a_principal_take_turns_to_render() -> None:
    now = [100.0]
    waits: list[float] = []
    rendered = asyncio.Event()

    async def pace(seconds: float) -> None:
        waits.append(seconds)  # the clock does not move: every turn is counted from "now"

    async def render() -> str:
        rendered.set()
        return "<p>panel</p>"

    sessions = WebSessions()
    hub: Any = SimpleNamespace(bus=MemoryBus())
    live = LiveStreams(hub, sessions, per_session=8, per_principal=8, refresh_s=1.0)
    live.pace = pace
    live.clock = lambda: now[0]

    async def show(principal: str, *names: str) -> None:
        _, session = sessions.open(principal, principal)
        viewer: Any = SimpleNamespace(principal=SimpleNamespace(id=principal), session=session)
        for name in names:
            stream = Stream(viewer)
            live.join_panel(stream, Panel(name, Panel.key_for(viewer, name), ("t",), render))
        async with asyncio.timeout(WAIT_S):
            while live.renders < expected:
                rendered.clear()
                await rendered.wait()

    spacing = 1.0 / PRINCIPAL_RENDERS
    # Three different panels of alice, all due at once: one renders now, each other one a turn
    # after the one before.
    expected = 3
    await show("alice", "one", "two", "three")
    assert sorted(waits) == [spacing, 2 * spacing]
    # Another principal's panel does not wait for alice's turns.
    expected = 4
    await show("bob", "four")
    assert sorted(waits) == [spacing, 2 * spacing]
