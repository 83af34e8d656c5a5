"""Links of Discord users to hub humans end with the human's rights (issue 22, item 8): rotating
the human's token ends their links and outstanding codes in the same commit, on every hub; codes
expire, are bounded per human and are deleted; ``unlink`` (REST, CLI) ends a link."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import asyncpg
import httpx
import pytest

from parley.adapters.bus.postgres import asyncpg_dsn
from parley.adapters.store.sql import SqlTx
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from parley.testing import FakeClock
from tests.integration.discord.conftest import MAPLE, STRANGER, DiscordHub
from tests.integration.discussion_support import within

Api = Callable[[str | None], httpx.AsyncClient]
TTL_S = 120.0
KEEP = 2


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"discord_link_code_ttl_s": TTL_S, "discord_link_codes_per_human": KEEP}
    )


async def human(hub: Hub, operator: Principal, name: str) -> tuple[Principal, str]:
    created = await hub.identity.create_human(operator, HumanSpec(id=name))
    return created.principal, created.token


async def rows(hub: Hub, table: str, principal_id: str) -> list[Any]:
    async with hub.store.read() as tx:
        c = tx.table(table).c
        return list(await tx.select(table, c.principal_id == principal_id))


async def unlinked_events(hub: Hub) -> list[tuple[str, str, str]]:
    """(actor, platform user, reason) of every ``bridge.unlinked`` event, in order."""
    async with hub.store.read() as tx:
        e = tx.table("events").c
        found = await tx.select("events", e.type == "bridge.unlinked", order_by=[e.id])
    return [(r.actor, r.payload["platform_user_id"], r.payload["reason"]) for r in found]


async def test_rotating_a_humans_token_ends_their_links_and_codes(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    await chat.gated_agent("lead")
    maple, _ = await human(hub, operator, "maple")
    await chat.start_bridge()
    await chat.fake.identified.wait()
    root, post = await chat.start_worker()
    assert "'maple'" in await chat.link(maple, MAPLE, thread_id=post.id)
    assert "'operator'" in await chat.link(operator, STRANGER, thread_id=post.id)
    outstanding = (await hub.bridge_links.create_code(maple)).code
    # Linked: the command reaches the hub as maple, who may not see this worker, so to maple it
    # does not exist.
    before = await chat.slash("spawn-child", post.id, MAPLE, prompt="x")
    assert before.startswith("Refused (worker_not_found)")

    await hub.identity.issue_token(operator, "maple", rotate=True)

    # The link made before the rotation no longer acts as maple, in commands or messages.
    assert "not linked" in await chat.slash("spawn-child", post.id, MAPLE, prompt="x")
    await chat.fake.user_message(post.id, "keep going", user_id=MAPLE)
    await chat.fake.wait_for(
        lambda f: any("not linked to a parley identity" in m for m in post.messages.values())
    )
    # A code issued before the rotation no longer links.
    refused = await chat.slash("link", post.id, MAPLE, code=outstanding)
    assert refused.startswith("Refused (link_code_invalid)")
    assert await rows(hub, "bridge_links", "maple") == []
    assert await rows(hub, "bridge_link_codes", "maple") == []
    assert await unlinked_events(hub) == [("operator", str(MAPLE), "token_rotated")]
    # Another human's link is untouched.
    assert root.id in await chat.slash("topology", post.id, STRANGER)
    # A code asked for after the rotation links again.
    assert "'maple'" in await chat.link(maple, MAPLE, thread_id=post.id)


async def test_codes_expire_are_bounded_per_human_and_are_deleted(
    hub: Hub, operator: Principal, clock: FakeClock
) -> None:
    maple, _ = await human(hub, operator, "maple")
    links = hub.bridge_links
    codes = []
    for _ in range(3):
        codes.append((await links.create_code(maple)).code)
        clock.advance(1)
    first, second, third = codes
    # At most KEEP are outstanding: the third replaced the oldest.
    assert len(await rows(hub, "bridge_link_codes", "maple")) == KEEP
    assert await links.redeem("1001", first) is None

    clock.advance(TTL_S - 3)  # the second code's last second
    assert await links.redeem("1002", second) == "maple"
    clock.advance(2)
    assert await links.redeem("1003", third) is None  # expired
    # Used and expired codes are gone from the store.
    assert await rows(hub, "bridge_link_codes", "maple") == []

    await links.create_code(maple)
    await links.create_code(operator, "maple")  # the operator's codes for maple count too
    assert len(await rows(hub, "bridge_link_codes", "maple")) == KEEP
    assert await links.sweep_expired() == 0
    clock.advance(TTL_S)
    assert await links.sweep_expired() == KEEP
    assert await rows(hub, "bridge_link_codes", "maple") == []


async def test_unlink_ends_links_the_caller_may_end(
    hub: Hub, operator: Principal, api: Api
) -> None:
    maple, maple_token = await human(hub, operator, "maple")
    kai, _ = await human(hub, operator, "kai")
    for user, who in (("2001", maple), ("2002", maple), ("3001", kai)):
        assert await hub.bridge_links.redeem(user, (await hub.bridge_links.create_code(who)).code)
    as_maple, as_operator = api(maple_token), api(hub.operator_token)

    mine = await as_maple.get("/v1/discord/links")
    assert sorted(r["user_id"] for r in mine.json()) == ["2001", "2002"]
    everyone = await as_operator.get("/v1/discord/links")
    assert sorted(r["user_id"] for r in everyone.json()) == ["2001", "2002", "3001"]
    others = await as_maple.get("/v1/discord/links", params={"principal_id": "kai"})
    assert (others.status_code, others.json()["code"]) == (403, "link_forbidden")

    # Maple cannot end kai's link, and learns nothing about it.
    refused = await as_maple.post("/v1/discord/unlink", json={"user_id": "3001"})
    assert (refused.status_code, refused.json()["code"]) == (404, "link_not_found")
    refused = await as_maple.post("/v1/discord/unlink", json={"principal_id": "kai"})
    assert (refused.status_code, refused.json()["code"]) == (403, "link_forbidden")
    assert await hub.bridge_links.principal_of("3001") == kai

    one = await as_maple.post("/v1/discord/unlink", json={"user_id": "2001"})
    assert [r["user_id"] for r in one.json()["unlinked"]] == ["2001"]
    assert await hub.bridge_links.principal_of("2001") is None
    assert await hub.bridge_links.principal_of("2002") == maple
    theirs = await as_operator.post("/v1/discord/unlink", json={"principal_id": "kai"})
    assert [r["user_id"] for r in theirs.json()["unlinked"]] == ["3001"]
    rest = await as_maple.post("/v1/discord/unlink", json={})
    assert [r["user_id"] for r in rest.json()["unlinked"]] == ["2002"]
    again = await as_maple.post("/v1/discord/unlink", json={})
    assert again.status_code == 200 and again.json()["unlinked"] == []
    nobody = await as_operator.post("/v1/discord/unlink", json={"principal_id": "nobody"})
    assert (nobody.status_code, nobody.json()["code"]) == (404, "principal_not_found")

    assert await unlinked_events(hub) == [
        ("maple", "2001", "unlinked"),
        ("operator", "3001", "unlinked"),
        ("maple", "2002", "unlinked"),
    ]
    assert await hub.bridge_links.links(operator) == []


@pytest.fixture
async def other(
    postgres_only: None, hub: Hub, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[Hub]:
    """A second hub on the same database and clock."""
    second = build_hub(hub.settings.model_copy(update={"home": tmp_path / "b"}), clock=clock)
    await second.start(background=False)
    try:
        yield second
    finally:
        await second.stop()


async def _waiting_on_a_lock(url: str) -> bool:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        found = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
    finally:
        await conn.close()
    return bool(found)


async def test_a_rotation_on_another_hub_ends_a_link_made_while_it_ran(
    hub: Hub, other: Hub, operator: Principal
) -> None:
    """Hub A is redeeming maple's code (the code row locked, the link not yet written) when hub
    B rotates maple's token. B waits for A's commit and then ends the new link: no link made
    with a code issued before the rotation outlives it."""
    maple, _ = await human(hub, operator, "maple")
    code = (await hub.bridge_links.create_code(maple)).code
    holding, go_on = asyncio.Event(), asyncio.Event()
    armed = True
    get = SqlTx.get

    async def paused_get(self: SqlTx, name: str, key: str, *, for_update: bool = False) -> Any:
        nonlocal armed
        if name == "bridge_links" and armed:
            armed = False
            holding.set()  # inside A's redeem: the code row locked and deleted, uncommitted
            await go_on.wait()
        return await get(self, name, key, for_update=for_update)

    with patch.object(SqlTx, "get", paused_get):
        redeeming = asyncio.create_task(hub.bridge_links.redeem("4001", code))
        await within(holding.wait(), "A's redeem to hold the code")
        b_operator = await other.identity.require("operator")
        rotating = asyncio.create_task(other.identity.issue_token(b_operator, "maple", rotate=True))
        deadline = asyncio.get_running_loop().time() + 15
        url = hub.settings.resolved_database_url()
        while not await _waiting_on_a_lock(url):
            assert asyncio.get_running_loop().time() < deadline, "B's rotation never waited"
            await asyncio.sleep(0.01)
        go_on.set()
        assert await within(redeeming, "A's redeem") == "maple"
        await within(rotating, "B's rotation")
    assert await rows(hub, "bridge_links", "maple") == []
    assert await hub.bridge_links.principal_of("4001") is None
    assert await unlinked_events(hub) == [("operator", "4001", "token_rotated")]
