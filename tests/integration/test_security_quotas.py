"""Per-sender quotas: messages and bytes a minute, every stored copy counted, channel posts
included; refused with 429 and Retry-After, allowed again once the minute has passed."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from parley.config import Settings
from parley.core.errors import RateLimited, TooLarge
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.testing import FakeClock
from tests.conftest import MakeAgent
from tests.integration.mail_support import all_messages, send

Api = Callable[[str | None], httpx.AsyncClient]
RATE = 3
BYTES = 50_000
BODY = "x" * 10_000


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"send_rate_per_minute": RATE, "send_bytes_per_minute": BYTES}
    )


def test_defaults_are_600_messages_and_32_mib_a_minute() -> None:
    fields = Settings.model_fields
    assert fields["send_rate_per_minute"].default == 600
    assert fields["send_bytes_per_minute"].default == 32 * 2**20


async def test_the_rate_quota_refuses_with_429_and_recovers_after_the_minute(
    hub: Hub, make_agent: MakeAgent, api: Api, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    client = api(alice.token)
    for i in range(RATE):
        r = await client.post("/v1/mail", json={"to": "bob", "kind": "task", "body": f"m{i}"})
        assert r.status_code == 201, r.text
    clock.advance(20)
    refused = await client.post("/v1/mail", json={"to": "bob", "kind": "task", "body": "one more"})
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "quota_exceeded"
    assert f"{RATE} messages a minute" in body["message"]
    # The first send leaves the window 60 s after it was made, 40 s from now.
    assert refused.headers["Retry-After"] == "40"
    assert body["details"]["retry_after"] == 40
    assert len(await all_messages(hub)) == RATE
    clock.advance(40)
    again = await client.post("/v1/mail", json={"to": "bob", "kind": "task", "body": "later"})
    assert again.status_code == 201, again.text


async def test_every_copy_counts_against_the_byte_quota(hub: Hub, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    for name in ("bob", "carol", "dave", "erin"):
        await make_agent(name)
    # Four copies of ~10 kB: ~40 kB of the 50 kB a minute.
    await send(hub, alice.principal, "bob", body=BODY, cc=["carol", "dave", "erin"])
    # One more copy of ~10 kB would fit if the cc send had counted once.
    with pytest.raises(RateLimited) as refused:
        await send(hub, alice.principal, "bob", body=BODY)
    assert refused.value.code == "quota_exceeded"
    assert f"{BYTES:,} bytes a minute" in refused.value.message


async def test_a_send_bigger_than_the_whole_quota_is_refused_as_too_large(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    names = ["bob", "carol", "dave", "erin", "fred"]
    for name in names:
        await make_agent(name)
    with pytest.raises(TooLarge) as refused:
        await send(hub, alice.principal, "bob", body=BODY, cc=names[1:])
    assert (refused.value.code, refused.value.limit) == ("send_over_quota", BYTES)
    assert await all_messages(hub) == []


async def test_a_refused_send_does_not_use_the_quota(hub: Hub, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    for _ in range(RATE + 2):
        with pytest.raises(Exception, match="does not exist"):
            await send(hub, alice.principal, "nobody", body="lost")
    for i in range(RATE):
        await send(hub, alice.principal, "bob", body=f"m{i}")


async def test_a_refused_post_gives_its_charge_back(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    theirs = (await api(bob.token).post("/v1/channels", json={"name": "bobs"})).json()
    client = api(alice.token)
    for _ in range(RATE + 2):
        r = await client.post(f"/v1/channels/{theirs['id']}/messages", json={"content": "hi"})
        assert r.status_code == 403, r.text
    for i in range(RATE):
        await send(hub, alice.principal, "bob", body=f"m{i}")


async def test_channel_posts_count_against_the_same_quota(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    client = api(alice.token)
    channel = (await client.post("/v1/channels", json={"name": "notes"})).json()
    for i in range(RATE - 1):
        await send(hub, alice.principal, "bob", body=f"m{i}")
    posted = await client.post(f"/v1/channels/{channel['id']}/messages", json={"content": "one"})
    assert posted.status_code == 201, posted.text
    refused = await client.post(f"/v1/channels/{channel['id']}/messages", json={"content": "two"})
    assert (refused.status_code, refused.json()["code"]) == (429, "quota_exceeded")
    assert "Retry-After" in refused.headers


async def test_the_operator_is_not_limited(
    hub: Hub, make_agent: MakeAgent, operator: Principal
) -> None:
    await make_agent("bob")
    for i in range(RATE * 3):
        await send(hub, operator, "bob", body=f"op{i}")
    assert len(await all_messages(hub)) == RATE * 3
