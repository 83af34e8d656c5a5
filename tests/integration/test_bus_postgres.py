"""The LISTEN/NOTIFY bus (P2): commit order across hubs, nothing announced before or without its
commit, big payloads as nudges, and a listener that comes back after the server killed it.

Two stores and two buses on one database stand for two hubs. PostgreSQL only: on SQLite one hub
holds the database alone and the in-process bus serves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from parley.adapters.bus.postgres import CHANNEL, MAX_PAYLOAD_BYTES, PostgresBus, asyncpg_dsn
from parley.adapters.store.postgres import PostgresStore
from parley.adapters.store.postgres_bulk import NOTIFY_SEPARATOR
from parley.bootstrap import build_bus
from parley.core.ports import Subscription

DEADLINE_S = 10.0


async def _node(url: str) -> tuple[PostgresStore, PostgresBus]:
    store = PostgresStore(url)
    await store.open()
    bus = build_bus(store)
    assert isinstance(bus, PostgresBus)
    await bus.start()
    return store, bus


@pytest.fixture
async def two_hubs(
    postgres_only: None, database_url: str
) -> AsyncIterator[tuple[tuple[PostgresStore, PostgresBus], tuple[PostgresStore, PostgresBus]]]:
    a = await _node(database_url)
    b = await _node(database_url)
    try:
        yield a, b
    finally:
        for store, bus in (a, b):
            await bus.close()
            await store.close()


async def _take(sub: Subscription, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(DEADLINE_S):
        while len(got) < count:
            got.append(await sub.get())
    return got


async def _publish_in_tx(store: PostgresStore, bus: PostgresBus, topic: str, n: int) -> None:
    async def job(tx: Any) -> None:
        bus.publish_on_commit(tx, topic, {"n": n})

    await store.write(job)


async def test_both_hubs_see_every_publish_once_in_commit_order(two_hubs: Any) -> None:
    (store_a, bus_a), (store_b, bus_b) = two_hubs
    on_a = bus_a.subscribe(["channel:x"])
    on_b = bus_b.subscribe(["channel:x"])
    # Alternate the publishing hub; each write returns only once committed, so n is the
    # commit order.
    for n in range(40):
        store, bus = (store_a, bus_a) if n % 2 else (store_b, bus_b)
        await _publish_in_tx(store, bus, "channel:x", n)
    expected = [{"n": n} for n in range(40)]
    assert await _take(on_a, 40) == expected
    assert await _take(on_b, 40) == expected
    # Nothing more: a hub's own publishes are not delivered twice.
    await _publish_in_tx(store_a, bus_a, "channel:x", 99)
    assert await _take(on_a, 1) == [{"n": 99}]
    assert await _take(on_b, 1) == [{"n": 99}]


async def test_the_publishes_of_one_transaction_arrive_in_their_order(two_hubs: Any) -> None:
    """They travel joined, as many to a notification as fit under PostgreSQL's limit."""
    (store_a, bus_a), (_, bus_b) = two_hubs
    on_b = bus_b.subscribe(["channel:z"])
    payloads: list[str] = []
    entries = 0
    all_heard = asyncio.Event()

    def heard(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        nonlocal entries
        payloads.append(payload)
        entries += len(payload.split(NOTIFY_SEPARATOR))
        if entries == 50:
            all_heard.set()

    listener = await asyncpg.connect(asyncpg_dsn(store_a.url))
    await listener.add_listener(CHANNEL, heard)
    try:

        async def job(tx: Any) -> None:
            for n in range(50):
                bus_a.publish_on_commit(tx, "channel:z", {"n": n, "pad": "x" * 500})

        await store_a.write(job)
        assert await _take(on_b, 50) == [{"n": n, "pad": "x" * 500} for n in range(50)]
        async with asyncio.timeout(DEADLINE_S):
            await all_heard.wait()
    finally:
        await listener.close()
    assert 1 < len(payloads) < 50
    assert all(len(p.encode()) < 8_000 for p in payloads)


async def test_equal_publishes_of_one_transaction_all_arrive(two_hubs: Any) -> None:
    (store_a, bus_a), (_, bus_b) = two_hubs
    on_b = bus_b.subscribe(["inbox:bob"])

    async def job(tx: Any) -> None:
        for _ in range(3):
            bus_a.publish_on_commit(tx, "inbox:bob", {"type": "nudge"})

    await store_a.write(job)
    assert await _take(on_b, 3) == [{"type": "nudge"}] * 3


async def test_nothing_is_announced_for_a_rolled_back_transaction(two_hubs: Any) -> None:
    (store_a, bus_a), (_, bus_b) = two_hubs
    on_b = bus_b.subscribe(["hub"])

    async def failing(tx: Any) -> None:
        bus_a.publish_on_commit(tx, "hub", {"n": "rolled back"})
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        await store_a.write(failing)
    await _publish_in_tx(store_a, bus_a, "hub", 1)
    assert await _take(on_b, 1) == [{"n": 1}]


@pytest.mark.fresh_database  # it adds a table
async def test_a_notification_never_precedes_its_data(two_hubs: Any) -> None:
    """The subscriber on the other hub reads the row as soon as it hears of it."""
    (store_a, bus_a), (store_b, bus_b) = two_hubs
    on_b = bus_b.subscribe(["probe"])
    from sqlalchemy import Integer, text

    async def create(tx: Any) -> None:
        await tx.execute(text("CREATE TABLE probe (n int)"))

    await store_a.write(create)

    async def job(tx: Any) -> None:
        await tx.execute(text("INSERT INTO probe VALUES (7)"))
        bus_a.publish_on_commit(tx, "probe", {"n": 7})

    await store_a.write(job)
    await _take(on_b, 1)
    async with store_b.read() as tx:
        found = await tx.execute(text("SELECT n FROM probe").columns(n=Integer))
        assert found.scalar() == 7


async def test_a_big_payload_arrives_as_a_nudge_to_read_the_store(two_hubs: Any) -> None:
    (store_a, bus_a), (_, bus_b) = two_hubs
    on_b = bus_b.subscribe(["channel:big"])
    other = bus_b.subscribe(["channel:other"])

    async def job(tx: Any) -> None:
        bus_a.publish_on_commit(tx, "channel:big", {"text": "x" * (MAX_PAYLOAD_BYTES * 2)})

    await store_a.write(job)
    # What follows the nudge before the subscriber reads it is in the store it re-reads.
    assert await _take(on_b, 1) == [{"type": "overflow"}]
    await _publish_in_tx(store_a, bus_a, "channel:big", 3)
    assert await _take(on_b, 1) == [{"n": 3}]
    await bus_a.publish("channel:other", {"n": 4})
    assert await _take(other, 1) == [{"n": 4}]  # subscribers of other topics were not nudged


async def test_publish_outside_a_transaction_reaches_every_hub(two_hubs: Any) -> None:
    (_, bus_a), (_, bus_b) = two_hubs
    on_a = bus_a.subscribe(["revoked:x"])
    on_b = bus_b.subscribe(["revoked:x"])
    await bus_a.publish("revoked:x", {"type": "tokens_revoked"})
    assert await _take(on_a, 1) == [{"type": "tokens_revoked"}]
    assert await _take(on_b, 1) == [{"type": "tokens_revoked"}]


async def test_the_listener_comes_back_after_the_server_kills_it(two_hubs: Any) -> None:
    (store_a, bus_a), (store_b, bus_b) = two_hubs
    on_b = bus_b.subscribe(["channel:y"])
    assert bus_b.state == "listening"
    admin = await asyncpg.connect(asyncpg_dsn(store_b.url))
    try:
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid = $1",
            bus_b._conn.get_server_pid() if bus_b._conn is not None else 0,
        )
    finally:
        await admin.close()
    assert killed == 1
    # The subscriber is told to re-read the store: what was published meanwhile is there.
    assert await _take(on_b, 1) == [{"type": "overflow"}]
    assert bus_b.reconnects == 1
    assert bus_b.state == "listening"
    await _publish_in_tx(store_a, bus_a, "channel:y", 5)
    assert await _take(on_b, 1) == [{"n": 5}]


def test_sqlite_keeps_the_in_process_bus(tmp_path: Any) -> None:
    from parley.adapters.bus.memory import MemoryBus
    from parley.adapters.store.sqlite import SqliteStore

    assert isinstance(build_bus(SqliteStore(tmp_path / "p.db")), MemoryBus)
