"""The store's writer: a job the database aborted to break a deadlock is run again; an eager
write runs in its caller's task only when the writer is free, and commits all or nothing."""

from __future__ import annotations

import asyncio
import types
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Integer, text

from parley.adapters.bus.postgres import asyncpg_dsn
from parley.adapters.store.sql import SqlTx
from parley.adapters.store.sql_store import SqlStore
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.mail import InboxFilter, Message
from parley.core.ports import Tx
from parley.service.hub import Hub
from parley.service.mail.mailbox import SendRequest
from tests.conftest import MakeAgent


class Deadlock(Exception):
    """Shaped like a driver error for SQLSTATE 40P01 (deadlock_detected)."""

    def __init__(self) -> None:
        super().__init__("deadlock detected")
        self.orig = types.SimpleNamespace(sqlstate="40P01")


async def test_a_deadlocked_job_is_retried(hub: Hub) -> None:
    calls = 0

    async def job(tx: Tx) -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise Deadlock()
        return "committed"

    assert await hub.store.write(job) == "committed"
    assert calls == 3


async def test_retries_are_bounded_and_other_errors_are_not_retried(hub: Hub) -> None:
    calls = 0

    async def deadlocks(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        raise Deadlock()

    with pytest.raises(Deadlock):
        await hub.store.write(deadlocks)
    assert calls == 4

    calls = 0

    async def fails(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not a conflict")

    with pytest.raises(ValueError):
        await hub.store.write(fails)
    assert calls == 1


# -- eager writes: a lone write on a discussion's critical path skips the hop to the writer ----
async def _stored(hub: Hub, event_id: str) -> bool:
    async with hub.store.read() as tx:
        return await tx.get("events", event_id) is not None


async def _blocking_write(hub: Hub, order: list[str]) -> tuple[asyncio.Task[None], asyncio.Event]:
    """A queued write whose job holds the writer (mid-transaction) until released."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def holds(tx: Tx) -> None:
        entered.set()
        await release.wait()
        order.append("held")

    task = asyncio.create_task(hub.store.write(holds))
    await entered.wait()
    return task, release


async def test_an_eager_write_runs_in_the_callers_task_only_when_the_writer_is_idle(
    hub: Hub,
) -> None:
    async def where(tx: Tx) -> asyncio.Task[object] | None:
        return asyncio.current_task()

    me = asyncio.current_task()
    eager = await hub.store.write(where, eager=True)
    queued = await hub.store.write(where)
    assert queued is not me
    # Only a store whose write transaction never suspends runs it in the caller's task.
    assert (eager is me) == hub.store.eager_writes  # type: ignore[attr-defined]


async def test_an_eager_write_waits_for_the_transaction_that_holds_the_writer(hub: Hub) -> None:
    order: list[str] = []
    held, release = await _blocking_write(hub, order)
    eager = asyncio.create_task(hub.store.write(lambda tx: _note(order, "eager"), eager=True))
    # One loop turn: the eager write has started and found the writer taken.
    await asyncio.sleep(0)
    assert order == []
    release.set()
    await asyncio.gather(held, eager)
    assert order == ["held", "eager"]


async def test_an_eager_write_does_not_overtake_queued_writes(hub: Hub) -> None:
    order: list[str] = []
    held, release = await _blocking_write(hub, order)
    queued = [
        asyncio.create_task(hub.store.write(lambda tx, i=i: _note(order, f"queued-{i}")))
        for i in range(3)
    ]
    await asyncio.sleep(0)  # one loop turn: the three are in the writer's queue
    eager = asyncio.create_task(hub.store.write(lambda tx: _note(order, "eager"), eager=True))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(held, eager, *queued)
    assert order == ["held", "queued-0", "queued-1", "queued-2", "eager"]

    # A free writer that has a write queued but not yet taken: still behind it.
    order.clear()
    first = asyncio.create_task(hub.store.write(lambda tx: _note(order, "queued")))
    second = asyncio.create_task(hub.store.write(lambda tx: _note(order, "eager"), eager=True))
    await asyncio.gather(first, second)
    assert order == ["queued", "eager"]


async def _note(order: list[str], what: str) -> None:
    order.append(what)


async def test_a_failed_or_cancelled_eager_write_commits_nothing(hub: Hub) -> None:
    recorded: list[str] = []

    async def fails(tx: Tx) -> None:
        recorded.append(hub.ctx.events.record(tx, "test.eager", actor="t", subject="s").id)
        raise ValueError("a bug in the job")

    with pytest.raises(ValueError):
        await hub.store.write(fails, eager=True)
    assert not await _stored(hub, recorded[-1])

    entered, never = asyncio.Event(), asyncio.Event()

    async def suspends(tx: Tx) -> None:
        recorded.append(hub.ctx.events.record(tx, "test.eager", actor="t", subject="s").id)
        entered.set()
        await never.wait()

    write = asyncio.create_task(hub.store.write(suspends, eager=True))
    await entered.wait()
    write.cancel()
    with pytest.raises(asyncio.CancelledError):
        await write
    if hub.store.eager_writes:  # type: ignore[attr-defined]
        assert not await _stored(hub, recorded[-1])
        # The writer is free again: the next write commits.

        async def commits(tx: Tx) -> str:
            return hub.ctx.events.record(tx, "test.eager", actor="t", subject="s").id

        assert await _stored(hub, await hub.store.write(commits, eager=True))
    else:
        never.set()  # a queued job runs on in the writer whatever its caller does


# -- a batch's inserts wait for its statements only when those read them -----------------------
async def test_a_batch_of_sends_flushes_its_inserts_once(
    hub: Hub, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The messages and events buffered by the sends of a batch go out together at the end,
    one statement per table, not before every send (a round trip per table per send on
    PostgreSQL)."""
    sender = await make_agent("batch-sender")
    recipients = [(await make_agent(f"batch-to-{i}")).id for i in range(4)]
    for to in recipients:  # every inbox position known (SQLite keeps them in memory)
        await hub.mail.send(sender.principal, SendRequest(to=to, kind="info", subject="warm"))
    flushes: list[set[str]] = []
    store = type(hub.store)
    insert_rows = store.insert_rows

    async def counted(self: SqlStore, tx: SqlTx, pending: Any, *notifications: Any) -> None:
        flushes.append(set(pending))
        await insert_rows(self, tx, pending, *notifications)

    monkeypatch.setattr(store, "insert_rows", counted)
    held, release = await _blocking_write(hub, [])
    sends = [
        asyncio.create_task(
            hub.mail.send(sender.principal, SendRequest(to=to, kind="info", subject=f"n{i}"))
        )
        for i, to in enumerate(recipients * 2)
    ]
    await asyncio.sleep(0)  # one loop turn: the eight sends are queued behind the held write
    release.set()
    await asyncio.gather(held, *sends)
    assert flushes == [{"messages", "events"}]
    assert len({(await s).message.id for s in sends}) == 8


async def test_a_position_taken_after_its_principal_is_inserted_sees_it(hub: Hub) -> None:
    """The other side of the rule: a statement that reads principals waits for a principal
    buffered in the same transaction."""
    now = datetime.now(UTC)
    agent = Principal(id="fresh-in-tx", kind="agent", display_name="fresh", created=now)

    async def job(tx: Tx) -> Message:
        tx.insert("principals", agent)
        return await hub.mail.deliver_system(tx, agent.id, "info", "to a principal of this tx")

    assert (await hub.store.write(job)).seq == 1


async def test_mail_marked_delivered_in_the_transaction_that_stored_it_is_delivered(
    hub: Hub, make_agent: MakeAgent
) -> None:
    """Marking delivered skips the batch's buffered inserts, except the mail it marks."""
    to = await make_agent("marked-in-tx")

    async def job(tx: Tx) -> tuple[str, list[str]]:
        msg = await hub.mail.deliver_system(tx, to.id, "info", "stored and marked at once")
        return msg.id, await tx.mark_delivered([msg.id, "not-a-message"], datetime.now(UTC))

    message_id, marked = await hub.store.write(job)
    assert marked == [message_id]
    async with hub.store.read() as tx:
        stored = await tx.get("messages", message_id)
    assert stored is not None and stored.status == "delivered"


async def test_a_writer_connection_ended_while_idle_is_replaced_without_failing_a_write(
    postgres_only: None, hub: Hub, make_agent: MakeAgent
) -> None:
    """The PostgreSQL writer keeps one connection. If the server ends it while it is idle (a
    restart, an administrator, an idle timeout), the next write begins on a fresh one: nothing
    had run yet, so nothing is lost or repeated and the caller sees no error."""

    async def backend_pid(tx: Tx) -> int:
        assert isinstance(tx, SqlTx)
        pid = text("SELECT pg_backend_pid()").columns(pid=Integer)
        return int((await tx.execute(pid)).scalar_one())

    first = await hub.store.write(backend_pid)
    admin = await asyncpg.connect(asyncpg_dsn(hub.store.url))  # type: ignore[attr-defined]
    try:
        # With a timeout the call returns once the backend has exited.
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 5000)", first)
    finally:
        await admin.close()
    sender, to = await make_agent("idle-end-from"), await make_agent("idle-end-to")
    sent = await hub.mail.send(sender.principal, SendRequest(to=to.id, kind="info", subject="s"))
    async with hub.store.read() as tx:
        assert await tx.get("messages", sent.message.id) is not None
    assert await hub.store.write(backend_pid) != first


# -- durability: PARLEY_SQLITE_SYNCHRONOUS --------------------------------------------------------
_SYNCHRONOUS = text("PRAGMA synchronous").columns(synchronous=Integer)


@pytest.mark.parametrize(("setting", "pragma"), [("normal", 1), ("full", 2)])
async def test_sqlite_commits_are_as_durable_as_configured(
    tmp_path: Any, setting: str, pragma: int
) -> None:
    from parley.bootstrap import build_store
    from parley.config import Settings

    store = build_store(Settings(home=tmp_path, sqlite_synchronous=setting))  # type: ignore[arg-type]
    await store.open()
    try:

        async def level(tx: Tx) -> int:
            assert isinstance(tx, SqlTx)
            return int((await tx.execute(_SYNCHRONOUS)).scalar_one())

        # The writer's connection commits; a reader's is set the same way.
        assert await store.write(level) == pragma
        async with store.read() as tx:
            assert int((await tx.execute(_SYNCHRONOUS)).scalar_one()) == pragma
    finally:
        await store.close()


def test_an_unknown_sqlite_synchronous_setting_is_refused(monkeypatch: Any) -> None:
    from pydantic import ValidationError

    from parley.config import Settings

    monkeypatch.setenv("PARLEY_SQLITE_SYNCHRONOUS", "off")
    with pytest.raises(ValidationError, match="sqlite_synchronous"):
        Settings()


async def test_a_batch_of_sends_takes_its_inbox_positions_at_once_in_order(
    hub: Hub, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox positions of all the mail of a batch are taken together just before it
    commits (one statement on PostgreSQL, whose row locks then last only until the commit
    instead of from each send on), and each inbox's follow the order of the sends."""
    sender = await make_agent("positions-sender")
    recipients = [(await make_agent(f"positions-to-{i}")).id for i in range(3)]
    for to in recipients:
        await hub.mail.send(sender.principal, SendRequest(to=to, kind="info", subject="first"))
    taken: list[dict[str, int]] = []
    store = type(hub.store)
    take = store.take_inbox_positions

    async def counted(self: SqlStore, tx: SqlTx, counts: dict[str, int]) -> dict[str, int]:
        taken.append(dict(counts))
        return await take(self, tx, counts)

    monkeypatch.setattr(store, "take_inbox_positions", counted)
    held, release = await _blocking_write(hub, [])
    order = [recipients[i % 3] for i in range(9)]
    sends = [
        asyncio.create_task(
            hub.mail.send(sender.principal, SendRequest(to=to, kind="info", subject=f"n{i}"))
        )
        for i, to in enumerate(order)
    ]
    await asyncio.sleep(0)  # one loop turn: the nine sends are queued behind the held write
    release.set()
    await asyncio.gather(held, *sends)
    assert taken == [dict.fromkeys(recipients, 3)]
    sent = [(await s).message for s in sends]
    for to in recipients:
        assert [m.seq for m in sent if m.recipient_id == to] == [2, 3, 4]
        async with hub.store.read() as tx:
            stored = await tx.list_inbox(to, InboxFilter())
        assert [(m.subject, m.seq) for m in stored] == [
            ("first", 1),
            *((m.subject, m.seq) for m in sent if m.recipient_id == to),
        ]


async def test_mail_waiting_for_its_position_is_placed_before_a_read_of_mail(
    hub: Hub, make_agent: MakeAgent
) -> None:
    """A transaction that stores mail and then reads the inbox sees that mail, placed, even
    with nothing else buffered."""
    to = await make_agent("read-in-tx")
    now = datetime.now(UTC)
    mail = [
        Message(
            id=new_ulid(),
            created=now,
            from_kind="system",
            from_id="system",
            to_kind="agent",
            to_id=to.id,
            recipient_id=to.id,
            kind="info",
            subject=subject,
        )
        for subject in ("one", "two")
    ]
    placed: list[str] = []

    async def job(tx: Tx) -> list[Message]:
        for msg in mail:
            tx.deliver_to_inbox(msg, lambda m: placed.append(m.id))
        return await tx.list_inbox(to.id, InboxFilter())

    listed = await hub.store.write(job)
    assert [(m.id, m.seq) for m in listed] == [(mail[0].id, 1), (mail[1].id, 2)]
    assert placed == [mail[0].id, mail[1].id]


# -- closing -----------------------------------------------------------------------------------
async def test_writes_pending_when_the_store_closes_fail_and_later_ones_are_refused(
    settings: Any,
) -> None:
    """A hub stopping with work in flight: the write the writer is running, the ones queued
    behind it and any asked for later each fail with ``storage_error`` instead of waiting
    for a writer that is gone."""
    from parley.bootstrap import build_store
    from parley.core.errors import StorageError

    store = build_store(settings)
    await store.open()
    running, never = asyncio.Event(), asyncio.Event()

    async def holds_the_writer(tx: Tx) -> None:
        running.set()
        await never.wait()

    async def quick(tx: Tx) -> int:
        return 1

    in_flight = asyncio.create_task(store.write(holds_the_writer))
    async with asyncio.timeout(30):
        await running.wait()
    queued = asyncio.create_task(store.write(quick))
    await asyncio.sleep(0)  # one turn of the loop: ``queued`` puts its job on the queue
    assert store._queue.qsize() == 1
    await store.close()
    async with asyncio.timeout(30):
        for pending in (in_flight, queued):
            with pytest.raises(StorageError, match="the store is closed"):
                await pending
        with pytest.raises(StorageError, match="the store is closed"):
            await store.write(quick)
