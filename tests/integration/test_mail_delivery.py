"""M6 delivery guarantees: idempotent resend, per sender→recipient order, TTL expiry."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from parley.core.errors import Conflict
from parley.core.mail import InboxFilter, Message
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import all_messages, send

SENDERS = 20
PER_SENDER = 15


async def test_a_resend_with_the_same_key_returns_the_original(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    carol = await make_agent("carol")
    await make_agent("bob")
    body = {"to": "bob", "kind": "task", "body": "once", "idempotency_key": "job-42"}
    first = await api(alice.token).post("/v1/mail", json=body)
    again = await api(alice.token).post("/v1/mail", json={**body, "body": "changed"})
    assert (first.status_code, again.status_code) == (201, 200)  # test_mail_idempotent_replay
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["body"] == "once"
    via_service = await send(hub, alice.principal, "bob", body="x", idempotency_key="job-42")
    assert via_service.id == first.json()["id"]
    assert [m.id for m in await all_messages(hub)] == [first.json()["id"]]
    # Keys belong to their sender: carol's job-42 is another message.
    other = await api(carol.token).post("/v1/mail", json=body)
    assert other.json()["id"] != first.json()["id"]
    assert len(await all_messages(hub)) == 2


async def test_concurrent_resends_with_one_key_make_one_message(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    sent = await asyncio.gather(
        *(send(hub, alice.principal, "bob", idempotency_key="same", body=str(i)) for i in range(10))
    )
    assert len({m.id for m in sent}) == 1
    assert len(await all_messages(hub)) == 1


async def test_a_resend_of_a_blocker_does_not_copy_the_operator_twice(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    for _ in range(3):
        await send(hub, alice.principal, "bob", "blocker", idempotency_key="b-1")
    assert sorted(m.recipient_id for m in await all_messages(hub)) == ["bob", "operator"]


def assert_ordered(inbox: list[Message], senders: list[str]) -> None:
    """Every sender's messages arrive in the order it sent them, each exactly once, and the
    inbox positions are distinct and increasing."""
    seqs = [m.seq for m in inbox]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for sender in senders:
        bodies = [m.body for m in inbox if m.from_id == sender]
        assert bodies == [f"{sender}:{i}" for i in range(PER_SENDER)], sender


async def test_order_per_sender_holds_under_concurrent_senders(
    hub: Hub, make_agent: MakeAgent
) -> None:
    await make_agent("bob")
    senders = [await make_agent(f"s{n:02d}") for n in range(SENDERS)]
    start = asyncio.Event()

    async def run(sender: Any) -> None:
        await start.wait()
        for i in range(PER_SENDER):
            await send(hub, sender.principal, "bob", body=f"{sender.id}:{i}")

    tasks = [asyncio.create_task(run(s)) for s in senders]
    start.set()
    await asyncio.gather(*tasks)
    bob = await hub.identity.require("bob")
    inbox = await hub.mail.inbox(bob, "bob", InboxFilter(limit=1000))
    assert len(inbox) == SENDERS * PER_SENDER
    assert_ordered(inbox, [s.id for s in senders])


async def test_order_per_sender_holds_over_rest(api: Any, make_agent: MakeAgent, hub: Hub) -> None:
    bob = await make_agent("bob")
    senders = [await make_agent(f"s{n:02d}") for n in range(SENDERS)]
    start = asyncio.Event()

    async def run(sender: Any) -> None:
        client = api(sender.token)
        await start.wait()
        for i in range(PER_SENDER):
            r = await client.post(
                "/v1/mail", json={"to": "bob", "kind": "report", "body": f"{sender.id}:{i}"}
            )
            assert r.status_code == 201, r.text

    tasks = [asyncio.create_task(run(s)) for s in senders]
    start.set()
    await asyncio.gather(*tasks)
    r = await api(bob.token).get("/v1/agents/bob/inbox", params={"limit": 1000})
    inbox = [Message.model_validate(m) for m in r.json()]
    assert len(inbox) == SENDERS * PER_SENDER
    assert_ordered(inbox, [s.id for s in senders])


async def test_ttl_expiry_marks_mail_expired_and_keeps_it(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    short = await send(hub, alice.principal, "bob", subject="short", ttl_seconds=60)
    default = await send(hub, alice.principal, "bob", subject="default")
    done = await send(hub, alice.principal, "bob", subject="done", ttl_seconds=60)
    await hub.mail.archive(bob.principal, done.id, None)
    clock.advance(59)
    assert await hub.mail.expire_due() == []
    clock.advance(1)
    expired = await hub.mail.expire_due()
    assert [m.id for m in expired] == [short.id]
    assert await hub.mail.expire_due() == []  # once only
    r = await api(bob.token).get(f"/v1/mail/{short.id}")
    assert r.status_code == 200
    got = r.json()
    assert (got["status"], got["failure_reason"], got["subject"]) == (
        "expired",
        "ttl_expired",
        "short",
    )
    inbox = (await api(bob.token).get("/v1/agents/bob/inbox")).json()
    # The owner's fetch delivers what was pending; the expired message stays expired.
    assert {m["id"]: m["status"] for m in inbox} == {short.id: "expired", default.id: "delivered"}
    assert (await api(bob.token).get(f"/v1/mail/{done.id}")).json()["status"] == "closed"
    with pytest.raises(Conflict) as info:
        await hub.mail.update_status(bob.principal, short.id, "read")
    assert info.value.code == "message_expired"
    clock.advance(86400)
    assert [m.id for m in await hub.mail.expire_due()] == [default.id]
    assert len(await all_messages(hub)) == 3
