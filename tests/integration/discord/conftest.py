"""Fixtures for the Discord bridge's tests: the fake Discord, the REAL discord.py client pointed
at it, and scripted agents whose turns wait on gates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import discord.gateway
import discord.http
import pytest
import yarl

from parley.adapters.bridges.discord import DiscordBridge
from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.runtime import Turn
from parley.service.bridge import Bridge
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.discord import FORUM_ID, GUILD_ID, FakeDiscord

StartBridge = Callable[[], Awaitable[Bridge]]


@pytest.fixture
async def fake_discord(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        # discord.py's configurable API base and the gateway it connects to: nothing leaves
        # this machine.
        monkeypatch.setattr(discord.http.Route, "BASE", fake.api_base)
        monkeypatch.setattr(
            discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(fake.gateway_url)
        )
        yield fake


@pytest.fixture
async def start_bridge(hub: Hub, fake_discord: FakeDiscord) -> AsyncIterator[StartBridge]:
    """Start a bridge (a new one each call, over the same hub and store: a restart)."""
    running: list[Bridge] = []

    async def start() -> Bridge:
        chat = DiscordBridge("test-token", guild_id=GUILD_ID, forum_channel_id=FORUM_ID)
        bridge = Bridge(hub, chat)
        await bridge.start()
        running.append(bridge)
        return bridge

    yield start
    for bridge in running:
        await bridge.close()


@dataclass
class Gated:
    """An agent whose turns answer ``reply``; a turn whose task names a gate's key waits for
    that gate."""

    reply: str = "done"
    reply_fn: Callable[[], str] | None = None
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    started: dict[str, asyncio.Event] = field(default_factory=dict)

    async def respond(self, turn: Turn) -> str:
        for key, gate in self.gates.items():
            if key in turn.prompt.task and not self.started[key].is_set():
                self.started[key].set()
                await gate.wait()
        return self.reply_fn() if self.reply_fn is not None else self.reply

    def gate(self, key: str) -> asyncio.Event:
        self.started[key] = asyncio.Event()
        return self.gates.setdefault(key, asyncio.Event())


async def gated_agent(
    make_agent: MakeAgent, runtimes: StaticRuntimes, name: str, reply: str = "done"
) -> Gated:
    await make_agent(name, runtime={"kind": "scripted"})
    agent = Gated(reply)
    runtimes.set(name, ScriptedRuntime(agent.respond))
    return agent
