"""The inbox long poll (``Mail.wait``) through the service and ``GET …/inbox/wait``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from parley.core.errors import InvalidRequest, PermissionDenied
from parley.core.mail import InboxFilter
from parley.service.hub import Hub
from parley.service.mail.mailbox import inbox_topic
from tests.conftest import MakeAgent
from tests.integration.mail_support import send
from tests.integration.mcp_support import waiting_on_inbox


async def test_wait_wakes_on_new_mail_and_delivers_it(hub: Hub, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    waiting = asyncio.create_task(hub.mail.wait(alice.principal, 60))
    await waiting_on_inbox(hub, "alice")
    sent = await send(hub, bob.principal, "alice", subject="wake")
    got = await waiting
    assert [m.id for m in got] == [sent.id]
    async with hub.store.read() as tx:
        rows = await tx.list_inbox("alice", InboxFilter())
    assert [r.status for r in rows] == ["delivered"]
    # The subscription is gone once the wait returns.
    bus: Any = hub.bus
    assert bus.subscriber_count(inbox_topic("alice")) == 0


async def test_an_inbox_event_without_new_mail_keeps_waiting(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    waiting = asyncio.create_task(hub.mail.wait(alice.principal, 60))
    await waiting_on_inbox(hub, "alice")
    # A nudge is not mail: the wait reads the store, finds nothing new and goes on waiting.
    await hub.bus.publish(inbox_topic("alice"), {"type": "mail.expired", "id": "x"})
    await hub.bus.publish(inbox_topic("alice"), {"type": "mail.expired", "id": "y"})
    sent = await send(hub, bob.principal, "alice")
    assert [m.id for m in await waiting] == [sent.id]


async def test_wait_times_out_empty_and_refuses_odd_timeouts(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    assert await hub.mail.wait(alice.principal, 0) == []
    assert await hub.mail.wait(alice.principal, 0.05) == []
    for bad in (-1.0, 301.0, float("nan")):
        with pytest.raises(InvalidRequest) as refused:
            await hub.mail.wait(alice.principal, bad)
        assert refused.value.code == "invalid_timeout"


async def test_only_the_owner_waits_on_an_inbox(hub: Hub, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    with pytest.raises(PermissionDenied) as refused:
        await hub.mail.wait(alice.principal, 0, owner="bob")
    assert refused.value.code == "inbox_forbidden"


async def test_rest_long_poll(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    a = api(alice.token)
    waiting = asyncio.create_task(a.get("/v1/agents/alice/inbox/wait", params={"timeout_s": 60}))
    await waiting_on_inbox(hub, "alice")
    r = await api(bob.token).post(
        "/v1/mail", json={"to": "alice", "kind": "task", "subject": "s", "body": "b"}
    )
    assert r.status_code == 201
    got = await waiting
    assert got.status_code == 200
    assert [m["id"] for m in got.json()] == [r.json()["id"]]

    empty = await a.get("/v1/agents/alice/inbox/wait", params={"timeout_s": 0})
    assert empty.status_code == 200
    assert empty.json() == []
    other = await a.get("/v1/agents/bob/inbox/wait", params={"timeout_s": 0})
    assert other.status_code == 403
    assert other.json()["code"] == "inbox_forbidden"
    bad = await a.get("/v1/agents/alice/inbox/wait", params={"timeout_s": 1000})
    assert bad.status_code == 400
    assert bad.json()["code"] == "invalid_timeout"
