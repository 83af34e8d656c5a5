"""Marking mail delivered, grouped (``service/delivery_marks.py``): marks that wait for the
writer together are written by one job with one statement, each inbox gets one
``mail.delivered`` event naming only the mail it changed, and every caller gets the group's
delivery time once it is committed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from parley.adapters.store.sql import SqlTx
from parley.core.ports import Tx
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import send


async def _delivered_events(hub: Hub, owner: str) -> list[list[str]]:
    async with hub.store.read() as tx:
        events = await hub.ctx.events.query(tx, type="mail.delivered", subject=f"inbox:{owner}")
    return [e.payload["ids"] for e in events]


async def _status(hub: Hub, message_id: str) -> Any:
    async with hub.store.read() as tx:
        return await tx.get("messages", message_id)


async def test_marks_waiting_for_the_writer_are_written_together(
    hub: Hub, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = await make_agent("marks-from")
    owners = [await make_agent(f"marks-to-{i}") for i in range(3)]
    sent = {
        o.id: [(await send(hub, sender.principal, o.id, "info")).id for _ in range(2)]
        for o in owners
    }
    statements: list[list[str]] = []
    mark = SqlTx.mark_delivered

    async def counted(tx: SqlTx, ids: Any, at: Any) -> list[str]:
        statements.append(list(ids))
        return await mark(tx, ids, at)

    monkeypatch.setattr(SqlTx, "mark_delivered", counted)
    entered, release = asyncio.Event(), asyncio.Event()

    async def holds(tx: Tx) -> None:
        entered.set()
        await release.wait()

    held = asyncio.create_task(hub.store.write(holds))
    await entered.wait()
    first = sent[owners[0].id][0]
    marks = [asyncio.create_task(hub.mail.mark_delivered(o.id, sent[o.id])) for o in owners] + [
        asyncio.create_task(hub.mail.mark_delivered(owners[0].id, [first]))
    ]  # asked twice
    await asyncio.sleep(0)  # one loop turn: every mark is waiting in one group
    release.set()
    await held
    times = await asyncio.gather(*marks)
    assert len(set(times)) == 1
    assert len(statements) == 1
    for owner in owners:
        assert await _delivered_events(hub, owner.id) == [sent[owner.id]]
        for message_id in sent[owner.id]:
            stored = await _status(hub, message_id)
            assert (stored.status, stored.delivered_at) == ("delivered", times[0])


async def test_mail_already_marked_is_not_counted_again(hub: Hub, make_agent: MakeAgent) -> None:
    sender, owner = await make_agent("again-from"), await make_agent("again-to")
    a = (await send(hub, sender.principal, owner.id, "info")).id
    await hub.mail.mark_delivered(owner.id, [a])
    b = (await send(hub, sender.principal, owner.id, "info")).id
    await hub.mail.mark_delivered(owner.id, [a, b])
    await hub.mail.mark_delivered(owner.id, [a, b])  # nothing left to mark: no event
    assert await _delivered_events(hub, owner.id) == [[a], [b]]
