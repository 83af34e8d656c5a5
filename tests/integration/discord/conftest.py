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
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.core.workers import Worker
from parley.service.bridge.bridge import Bridge
from parley.service.hub import Hub
from parley.service.workers.records import StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.discord import FORUM_ID, GUILD_ID, FakeDiscord, Thread

StartBridge = Callable[[], Awaitable[Bridge]]

# Discord user ids: one that links to a hub identity in the tests, one that never does.
MAPLE = 700000000000000001
STRANGER = 700000000000000002


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


@dataclass
class DiscordHub:
    """The hub under test beside the fake Discord, with the steps the bridge's tests share."""

    hub: Hub
    operator: Principal
    make_agent: MakeAgent
    runtimes: StaticRuntimes
    fake: FakeDiscord
    start_bridge: StartBridge

    async def gated_agent(self, name: str, reply: str = "done") -> Gated:
        """A scripted agent ``name`` whose turns a test can hold at gates."""
        await self.make_agent(name, runtime={"kind": "scripted"})
        agent = Gated(reply)
        self.runtimes.set(name, ScriptedRuntime(agent.respond))
        return agent

    async def only_post(self) -> Thread:
        """The one post in the forum, once it is there."""
        await self.fake.wait_for(lambda f: len(f.posts()) == 1)
        return self.fake.posts()[0]

    async def start_worker(self, prompt: str = "Audit the tests") -> tuple[Worker, Thread]:
        """Start a root worker of the agent "lead", let its first turn finish and return it with
        its post."""
        root = await self.hub.workers.start(
            self.operator, StartSpec(agent_id="lead", prompt=prompt)
        )
        await self.hub.tasks.wait_idle()
        return root, await self.only_post()

    async def slash(self, name: str, thread_id: int, user_id: int, **options: str) -> str:
        """Run a slash command as ``user_id`` and return the bot's reply."""
        token = await self.fake.slash(name, options, thread_id=thread_id, user_id=user_id)
        await self.fake.wait_for(lambda f: f.reply_to(token) is not None)
        return str(self.fake.reply_to(token))

    async def link(self, principal: Principal, user_id: int, thread_id: int = 1) -> str:
        """Link ``user_id`` to ``principal`` with a fresh code; the bot's reply."""
        issued = await self.hub.bridge_links.create_code(principal)
        return await self.slash("link", thread_id, user_id, code=issued.code)


@pytest.fixture
def chat(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    fake_discord: FakeDiscord,
    start_bridge: StartBridge,
) -> DiscordHub:
    return DiscordHub(hub, operator, make_agent, runtimes, fake_discord, start_bridge)
