"""M5 routing: to an agent, a session, a channel, or broadcast, with the broadcast rate limit."""

from __future__ import annotations

from typing import Any

import pytest

from parley.core.channels import Channel
from parley.core.errors import NotFound, RateLimited
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import all_messages, main_session_id, send


async def inbox_ids(api: Any, token: str, owner: str) -> list[str]:
    r = await api(token).get(f"/v1/agents/{owner}/inbox")
    assert r.status_code == 200, r.text
    return [m["id"] for m in r.json()]


async def make_channel(hub: Hub, members: list[str]) -> str:
    """A group channel with these members, written straight to the store."""
    channel_id = new_ulid()

    async def job(tx: Tx) -> None:
        tx.insert(
            "channels",
            Channel(
                id=channel_id,
                name="team",
                kind="group",
                created_by="operator",
                created=hub.ctx.clock.now(),
            ),
        )
        await tx.flush()
        await tx.set_members(channel_id, members)

    await hub.store.write(job)
    return channel_id


async def test_to_an_agent(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    r = await api(alice.token).post("/v1/mail", json={"to": "bob", "kind": "task"})
    msg = r.json()
    assert (msg["to_kind"], msg["to_id"], msg["recipient_id"]) == ("agent", "bob", "bob")
    assert await inbox_ids(api, bob.token, "bob") == [msg["id"]]
    assert await inbox_ids(api, carol.token, "carol") == []
    r = await api(alice.token).post("/v1/mail", json={"to": "nobody", "kind": "task"})
    assert r.status_code == 404
    assert r.json()["code"] == "recipient_not_found"


async def test_to_a_session_reaches_its_agent(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    session_id = await main_session_id(hub, "bob")
    r = await api(alice.token).post(
        "/v1/mail", json={"to": f"session:{session_id}", "kind": "task-dispatch"}
    )
    assert r.status_code == 201, r.text
    msg = r.json()
    assert (msg["to_kind"], msg["to_id"], msg["recipient_id"]) == ("session", session_id, "bob")
    assert await inbox_ids(api, bob.token, "bob") == [msg["id"]]
    with pytest.raises(NotFound) as info:
        await send(hub, alice.principal, "session:vs-nope")
    assert info.value.code == "session_not_found"


async def test_to_a_channel_copies_every_member_but_the_sender(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    dave = await make_agent("dave")
    channel_id = await make_channel(hub, ["alice", "bob", "carol"])
    r = await api(alice.token).post(
        "/v1/mail", json={"to": f"channel:{channel_id}", "kind": "notice", "subject": "hi team"}
    )
    assert r.status_code == 201, r.text
    primary = r.json()
    rows = await all_messages(hub)
    assert sorted(m.recipient_id for m in rows) == ["bob", "carol"]
    for m in rows:
        assert (m.to_kind, m.to_id, m.subject) == ("channel", channel_id, "hi team")
        assert m.copy_of in (None, primary["id"])
    assert len(await inbox_ids(api, bob.token, "bob")) == 1
    assert len(await inbox_ids(api, carol.token, "carol")) == 1
    assert await inbox_ids(api, alice.token, "alice") == []
    assert await inbox_ids(api, dave.token, "dave") == []
    r = await api(alice.token).post("/v1/mail", json={"to": "channel:nope", "kind": "notice"})
    assert (r.status_code, r.json()["code"]) == (404, "channel_not_found")


async def test_broadcast_reaches_every_other_active_agent(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    others = [await make_agent(name) for name in ("bob", "carol", "dave")]
    await make_agent("eve")
    await hub.store.write(lambda tx: tx.update("principals", "eve", active=False))
    hub.identity.forget("eve")
    r = await api(alice.token).post(
        "/v1/mail", json={"to": "*", "kind": "notice", "subject": "files locked"}
    )
    assert r.status_code == 201, r.text
    assert (r.json()["to_kind"], r.json()["to_id"]) == ("broadcast", "*")
    for agent in others:
        [got] = (await api(agent.token).get(f"/v1/agents/{agent.id}/inbox")).json()
        assert (got["subject"], got["from_id"]) == ("files locked", "alice")
    assert await inbox_ids(api, alice.token, "alice") == []
    rows = await all_messages(hub)
    assert sorted(m.recipient_id for m in rows) == ["bob", "carol", "dave"]
    assert sorted(str(m.copy_reason) for m in rows) == ["None", "broadcast", "broadcast"]


async def test_a_second_broadcast_within_the_interval_is_refused(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    carol = await make_agent("carol")
    await make_agent("bob")
    a = api(alice.token)
    assert (await a.post("/v1/mail", json={"to": "*", "kind": "notice"})).status_code == 201
    clock.advance(20)
    r = await a.post("/v1/mail", json={"to": "all", "kind": "notice"})
    assert r.status_code == 429
    assert r.json()["code"] == "rate_limited"
    assert r.headers["retry-after"] == "40"
    assert len(await all_messages(hub)) == 2
    # The limit is per sender, and only for broadcasts.
    assert (
        await api(carol.token).post("/v1/mail", json={"to": "*", "kind": "notice"})
    ).status_code == 201
    assert (await a.post("/v1/mail", json={"to": "bob", "kind": "task"})).status_code == 201
    with pytest.raises(RateLimited):
        await send(hub, alice.principal, "*", "notice")
    clock.advance(40)
    assert (await a.post("/v1/mail", json={"to": "*", "kind": "notice"})).status_code == 201
