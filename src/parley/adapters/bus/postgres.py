"""The cluster bus: PostgreSQL LISTEN/NOTIFY, for several hubs sharing one database (P2).

Every publish becomes a ``NOTIFY`` on one channel, and every hub (the publishing one included)
hears it on a dedicated listening connection and hands it to its local subscribers. Delivery to
the publishing hub goes through the database as well, on purpose: PostgreSQL hands out
notifications in commit order, so a subscriber sees every topic's events in the order their
transactions committed, whichever hub committed them. Delivering a hub's own events at once and
other hubs' later would let an SSE stream see channel message 6 (local) before 5 (remote) and
skip 5 as already passed.

A publish tied to a transaction (``publish_on_commit``) issues its ``NOTIFY`` inside that
transaction, just before the commit: the notification is sent if and only if the data commits,
and never before it. A transaction's publishes travel joined in as few notifications as fit
(``postgres_bulk.pack_notifications``), and are handed out one by one in their order. A
payload too big for a notification (PostgreSQL's limit is 8,000 bytes) goes out as a bare
nudge of its topic; subscribers get ``overflow`` and re-read from the store, as they do when
they fall behind. When the listening connection is lost, the bus reconnects
with backoff and then sends ``overflow`` to every subscriber: what it missed meanwhile is in the
store.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
from collections.abc import Iterable
from typing import Any

import asyncpg

from parley.adapters.bus.memory import OVERFLOW, MemoryBus, MemorySubscription
from parley.adapters.store.postgres import PostgresStore
from parley.adapters.store.postgres_bulk import NOTIFY_MAX_BYTES, NOTIFY_SEPARATOR
from parley.adapters.store.sql import SqlTx
from parley.core.ids import new_ulid
from parley.core.ports import Tx

CHANNEL = "parley_bus"
# PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more; keep clear of it.
MAX_PAYLOAD_BYTES = NOTIFY_MAX_BYTES
RECONNECT_MIN_S = 0.05
RECONNECT_MAX_S = 2.0


log = logging.getLogger("parley.bus")


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as a libpq one for asyncpg."""
    for prefix in ("postgresql+asyncpg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


class PostgresBus:
    """The ``Bus`` port over LISTEN/NOTIFY; local fan-out is a ``MemoryBus``."""

    # Other hubs publish on it too: caches of shared state must listen (see Identity).
    shared = True

    def __init__(self, store: PostgresStore, max_queue: int = 10_000) -> None:
        self.store = store
        # Names this process in its notifications (the hub's own id is made after the bus).
        self.origin = new_ulid()
        self.local = MemoryBus(max_queue)
        self._seq = itertools.count(1)
        self._conn: asyncpg.Connection | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._connected = asyncio.Event()
        self._closed = False
        # How often the listener came back after losing its connection (tests, logs).
        self.reconnects = 0

    # -- health ----------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """``listening``, or ``reconnecting`` while this hub hears nothing of other hubs."""
        if self._conn is not None and not self._conn.is_closed() and not self._lost.is_set():
            return "listening"
        return "reconnecting"

    async def start(self) -> None:
        """Connect the listener and keep it connected; returns once it listens."""
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep_listening(), name="parley-bus-listen")
        await self._connected.wait()

    @property
    def channel(self) -> str:
        """The channel of the hubs that share this store's schema (known once it is open):
        notifications are database-wide, and parleys in two schemas of one database must not
        hear each other's."""
        schema = self.store.schema
        if schema == "public":
            return CHANNEL
        return f"{CHANNEL}_{hashlib.blake2b(schema.encode(), digest_size=8).hexdigest()}"

    # -- publishing ------------------------------------------------------------------------------
    def _payload(self, topic: str, data: dict[str, Any]) -> str:
        # "<topic>\n<origin>:<n>\n<json>": a hub decodes only what some subscriber of it
        # listens to. The origin and its counter keep two equal events of one transaction apart
        # (PostgreSQL folds identical notifications of a transaction into one).
        head = f"{topic}\n{self.origin}:{next(self._seq)}\n"
        body = json.dumps(data, separators=(",", ":"))
        if len(head.encode()) + len(body.encode()) < MAX_PAYLOAD_BYTES:
            return head + body
        return head  # too big for a notification: a bare nudge to re-read the store

    def publish_on_commit(self, tx: Tx, topic: str, data: dict[str, Any]) -> None:
        assert isinstance(tx, SqlTx)
        # Sent with the transaction's last statement, with its buffered inserts (PostgresStore).
        tx.notify_on_commit(self.channel, self._payload(topic, data))

    async def publish(self, topic: str, data: dict[str, Any]) -> None:
        """Publish outside any transaction (e.g. a notice about something already committed)."""
        await self.store.notify(self.channel, self._payload(topic, data))

    # -- subscribing -----------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> MemorySubscription:
        return self.local.subscribe(topics)

    def subscriber_count(self, topic: str) -> int:
        return self.local.subscriber_count(topic)

    def _on_notification(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        # A transaction's publishes arrive joined, in their order (``pack_notifications``).
        for entry in payload.split(NOTIFY_SEPARATOR):
            self._deliver(entry)

    def _deliver(self, entry: str) -> None:
        topic, _, rest = entry.partition("\n")
        if topic not in self.local._subs:
            return  # nobody here listens to it: not even decoded
        _origin, _, body = rest.partition("\n")
        if not body:
            self._refill((topic,))
            return
        try:
            data = json.loads(body)
        except ValueError:
            log.warning("ignored a malformed bus notification on %s", topic)
            return
        self.local.publish_nowait(topic, data)

    def _refill(self, topics: Iterable[str] | None = None) -> None:
        """Tell subscribers (of ``topics``, or all) to re-read from the store."""
        subs: set[MemorySubscription] = set()
        for topic, topic_subs in self.local._subs.items():
            if topics is None or topic in topics:
                subs.update(topic_subs)
        for sub in subs:
            sub._put_overflow()

    # -- the listening connection ----------------------------------------------------------------
    async def _listen_once(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(asyncpg_dsn(self.store.url))
        conn.add_termination_listener(lambda _c: self._lost.set())
        await conn.add_listener(self.channel, self._on_notification)
        return conn

    async def _keep_listening(self) -> None:
        delay = RECONNECT_MIN_S
        first = True
        while not self._closed:
            try:
                self._lost.clear()
                self._conn = await self._listen_once()
            except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
                log.warning("the bus could not listen (%s); again in %.2fs", exc, delay)
                await asyncio.sleep(delay)  # backoff between reconnection attempts
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            delay = RECONNECT_MIN_S
            if not first:
                self.reconnects += 1
                log.warning("the bus listens again; subscribers re-read from the store")
                self._refill()
            first = False
            self._connected.set()
            await self._watch(self._conn)

    async def _watch(self, conn: asyncpg.Connection) -> None:
        """Return once ``conn`` is lost. A connection killed by the server is seen at once
        (termination listener); one that silently died is found by a periodic probe."""
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), 5.0)
            if self._lost.is_set() or conn.is_closed():
                break
            try:
                await asyncio.wait_for(conn.execute("SELECT 1"), 5.0)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                break
        with contextlib.suppress(Exception):
            await conn.close(timeout=1)

    async def close(self) -> None:
        self._closed = True
        self._lost.set()
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=1)
            self._conn = None
        await self.local.close()


__all__ = ["OVERFLOW", "PostgresBus", "asyncpg_dsn"]
