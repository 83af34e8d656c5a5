"""Size limits on what a sender stores: a mail payload, a whole message and a channel post are
refused with 413 and a message naming the limit, on every surface, and nothing is stored."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from mcp import Client

from parley.config import Settings
from parley.core.errors import TooLarge
from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.core.ports import Tx
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.surfaces.mcp import build_mcp
from tests.conftest import MakeAgent
from tests.integration.mail_support import all_messages, send
from tests.integration.mcp_support import refusal

Api = Callable[[str | None], httpx.AsyncClient]
PAYLOAD_MAX = 64 * 1024
MESSAGE_MAX = 256 * 1024


async def test_defaults_are_64_kib_per_payload_and_256_kib_per_message(hub: Hub) -> None:
    assert (hub.settings.payload_max_bytes, hub.settings.message_max_bytes) == (
        PAYLOAD_MAX,
        MESSAGE_MAX,
    )


async def test_an_oversized_payload_is_refused_with_413_and_the_limit(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    before = await all_messages(hub)
    payload = {"blob": "x" * PAYLOAD_MAX}
    r = await api(alice.token).post(
        "/v1/mail", json={"to": "bob", "kind": "task", "payload": payload}
    )
    assert r.status_code == 413
    body = r.json()
    assert body["code"] == "payload_too_large"
    assert "65,536" in body["message"] and "file" in body["message"]
    assert body["details"] == {"limit": PAYLOAD_MAX, "size": PAYLOAD_MAX + len('{"blob":""}')}
    assert await all_messages(hub) == before


async def test_a_message_is_measured_in_bytes_not_characters(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    before = await all_messages(hub)
    # 140,000 characters (fewer than the old 200,000-character body limit) but 280,000 bytes.
    body_text = "é" * 140_000
    r = await api(alice.token).post(
        "/v1/mail", json={"to": "bob", "kind": "task", "body": body_text}
    )
    assert r.status_code == 413, r.text
    assert r.json()["code"] == "message_too_large"
    assert "262,144" in r.json()["message"]
    assert await all_messages(hub) == before
    # Just under the limit in bytes goes through.
    ok = await api(alice.token).post(
        "/v1/mail", json={"to": "bob", "kind": "task", "body": "é" * 130_000}
    )
    assert ok.status_code == 201, ok.text


async def test_the_service_refuses_what_a_surface_did_not_check(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    with pytest.raises(TooLarge) as refused:
        await send(hub, alice.principal, "bob", subject="s", body="b" * (MESSAGE_MAX + 1))
    assert refused.value.code == "message_too_large"
    assert refused.value.limit == MESSAGE_MAX
    assert await all_messages(hub) == []


async def test_mcp_refuses_an_oversized_message_with_the_same_code(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    async with Client(build_mcp(hub, token=alice.token)) as client:
        result = await client.call_tool(
            "send_message",
            {
                "to": "bob",
                "kind": "task",
                "subject": "big",
                "body": "",
                "payload": {"blob": "x" * PAYLOAD_MAX},
            },
        )
    assert refusal(result)["code"] == "payload_too_large"
    assert await all_messages(hub) == []


async def test_a_channel_post_over_the_message_limit_is_refused_with_413(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    client = api(alice.token)
    channel = (await client.post("/v1/channels", json={"name": "solo"})).json()
    r = await client.post(
        f"/v1/channels/{channel['id']}/messages", json={"content": "ü" * (MESSAGE_MAX // 2 + 1)}
    )
    assert (r.status_code, r.json()["code"]) == (413, "message_too_large")
    assert (await client.get(f"/v1/channels/{channel['id']}/messages")).json() == []


class TestConfigured:
    """Limits come from the settings (``PARLEY_PAYLOAD_MAX_BYTES``…)."""

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"payload_max_bytes": 100, "message_max_bytes": 300})

    async def test_configured_limits_apply(self, hub: Hub, make_agent: MakeAgent) -> None:
        alice = await make_agent("alice")
        await make_agent("bob")
        with pytest.raises(TooLarge) as payload:
            await send(hub, alice.principal, "bob", payload={"k": "v" * 100})
        assert (payload.value.code, payload.value.limit) == ("payload_too_large", 100)
        with pytest.raises(TooLarge) as message:
            await send(hub, alice.principal, "bob", body="v" * 300)
        assert (message.value.code, message.value.limit) == ("message_too_large", 300)
        await send(hub, alice.principal, "bob", body="fits")

    async def test_the_hubs_own_mail_is_held_to_the_limit_too(
        self, hub: Hub, make_agent: MakeAgent
    ) -> None:
        await make_agent("bob")

        async def job(tx: Tx) -> None:
            await hub.mail.deliver_system(tx, "bob", "notice", "s", body="x" * 400)

        with pytest.raises(TooLarge):
            await hub.store.write(job)
        assert [m for m in await all_messages(hub) if m.body == "x" * 400] == []


class TestRemoteAnswers:
    """A remote agent's answer becomes a channel message: the post limit applies to it."""

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"message_max_bytes": 4000})

    async def test_a_remote_agents_answer_is_held_to_the_message_limit(
        self, hub: Hub, operator: Principal, make_agent: MakeAgent
    ) -> None:
        rem = await make_agent("rem", runtime={"kind": "remote"})
        channel = await hub.channels.create(operator, ChannelSpec(name="g", members=["rem"]))
        await hub.channels.post(operator, channel.id, "go")
        turn = await hub.turns.next(rem.principal, timeout_s=15)
        assert turn is not None
        with pytest.raises(TooLarge) as refused:
            await hub.turns.speak(rem.principal, turn.id, "é" * 2001)  # 4,002 bytes
        assert (refused.value.code, refused.value.limit) == ("message_too_large", 4000)
        answered = await hub.turns.speak(rem.principal, turn.id, "é" * 2000)
        assert answered.status == "answered"


def test_a_send_request_reports_its_stored_size() -> None:
    req = SendRequest(to="bob", kind="task", body="é")
    assert req.checked_size(payload_max=10, message_max=10_000) > 0
