"""Link codes over REST, ``parley discord check`` against the fake Discord, and a bridge that
refuses to start on a bad token."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from parley.adapters.bridges.discord import DiscordBridge, check
from parley.core.errors import ConfigError
from parley.service.bridge.bridge import Bridge
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from tests.conftest import MakeAgent
from tests.fakes.discord import FORUM_ID, GUILD_ID, FakeDiscord

Api = Callable[[str | None], httpx.AsyncClient]


async def test_a_link_code_is_for_a_human_the_caller_may_name(
    hub: Hub, api: Api, make_agent: MakeAgent
) -> None:
    operator = await hub.identity.authenticate(hub.operator_token)
    maple = await hub.identity.create_human(operator, HumanSpec(id="maple"))
    await hub.identity.create_human(operator, HumanSpec(id="kai"))
    agent = await make_agent("lead", runtime={"kind": "scripted"})

    made = await api(hub.operator_token).post(
        "/v1/discord/link-codes", json={"principal_id": "kai"}
    )
    assert made.status_code == 201
    assert made.json()["principal_id"] == "kai" and len(made.json()["code"]) >= 12

    own = await api(maple.token).post("/v1/discord/link-codes", json={})
    assert own.status_code == 201 and own.json()["principal_id"] == "maple"
    other = await api(maple.token).post("/v1/discord/link-codes", json={"principal_id": "kai"})
    assert (other.status_code, other.json()["code"]) == (403, "link_forbidden")
    as_agent = await api(agent.token).post("/v1/discord/link-codes", json={})
    assert (as_agent.status_code, as_agent.json()["code"]) == (400, "link_human_only")
    # Only the code's hash is stored.
    async with hub.store.read() as tx:
        rows = await tx.select("bridge_link_codes")
    assert made.json()["code"] not in {r.id for r in rows}


async def test_check_reports_what_holds_and_what_is_missing(fake_discord: FakeDiscord) -> None:
    results = await check("test-token", guild_id=GUILD_ID, forum_channel_id=FORUM_ID)
    assert [(name, ok) for name, ok, _ in results] == [
        ("bot token", True),
        ("message content intent", True),
        ("forum channel", True),
        ("permissions", True),
        ("slash commands", True),
    ]
    fake_discord.bot_permissions &= ~(1 << 34)  # no Manage Threads
    missing = await check("test-token", guild_id=GUILD_ID, forum_channel_id=FORUM_ID)
    assert ("permissions", False, "grant the bot in the forum: Manage Threads") in missing
    bad = await check("wrong-token", guild_id=GUILD_ID, forum_channel_id=FORUM_ID)
    assert [(name, ok) for name, ok, _ in bad] == [("bot token", False)]
    not_forum = await check("test-token", guild_id=GUILD_ID, forum_channel_id=12345)
    assert ("forum channel", False) in [(name, ok) for name, ok, _ in not_forum]


async def test_a_bridge_with_a_bad_token_refuses_to_start_and_says_why(
    hub: Hub, fake_discord: FakeDiscord
) -> None:
    chat = DiscordBridge("wrong-token", guild_id=GUILD_ID, forum_channel_id=FORUM_ID)
    bridge = Bridge(hub, chat)
    with pytest.raises(ConfigError) as refused:
        await bridge.start()
    assert refused.value.code == "discord_bad_token"
    assert "wrong-token" not in str(refused.value)
    await bridge.close()
