"""The SQL store shared by SQLite and PostgreSQL (SQLAlchemy 2 Core, async).

Writes go through a small group-commit writer: callers hand it a job (an async function of a
transaction); the writer runs as many queued jobs as are waiting in one database transaction and
commits once. If any job in a batch raises, the batch is rolled back and every job is run again
alone, so one refused request never takes its neighbours down and never leaves half its writes
behind. Side effects (bus publishes) are registered with ``tx.after_commit`` and run only once
the data they announce is durable: persist before publish. Transactions are ``sql.SqlTx``,
whose statements run on the driver connection a dialect's store gives them (``sqlite``,
``postgres``); this module and ``sql`` know no driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy.engine import Dialect

from parley.adapters.store import queries as q
from parley.adapters.store.sql import Job, Notifications, Rows, SqlTx, T
from parley.adapters.store.statements import Conversions
from parley.core.errors import ParleyError, StorageError, StorageFull
from parley.core.events import Event
from parley.core.ids import new_ulid

TRANSIENT_RETRIES = 3
_TRANSIENT_STATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure

log = logging.getLogger("parley.store")
PROBE_BYTES = 64 * 1024
"""The size of the write that checks whether a full disk has room again: more than any of
the hub's usual writes (a mail, a post, a turn) needs."""


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a PostgreSQL error (the driver's, or one that carries it)."""
    for err in (getattr(exc, "orig", None), exc):
        state = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


def _transient(exc: BaseException) -> bool:
    return sqlstate(exc) in _TRANSIENT_STATES or "deadlock detected" in str(exc)


class SqlStore:
    """A parley store: a group-commit writer on one driver connection, and readers."""

    dialect = "sql"
    # The SQLAlchemy dialect the statements are compiled for, and how values are converted.
    compiler: Dialect
    conv: Conversions
    # The driver's errors, reported as StorageError.
    driver_errors: tuple[type[BaseException], ...] = ()
    writer_count = 1
    # Whether ``write(eager=True)`` may run a job in the caller's task: only where statements
    # and the commit never suspend (SQLite's writer on the loop), so a cancel cannot land inside
    # a commit (a job cancelled while awaiting something else is rolled back whole), and where
    # batching saves little (a PostgreSQL commit waits for the server's WAL flush).
    eager_writes = False

    def __init__(self, url: str) -> None:
        self.url = url
        self._queue: asyncio.Queue[tuple[Job[Any], asyncio.Future[Any]]] = asyncio.Queue()
        self._writers: list[asyncio.Task[None]] = []
        # Set by close(): a write after it, or one still queued when it came, fails at once
        # instead of waiting for a writer that is gone.
        self._closed = False
        self.max_batch = 256
        # Held while a batch or an eager write runs: one transaction at a time on the writer.
        self._writing = asyncio.Lock()
        self._owner: str | None = None
        # Told the number of jobs of each committed batch (the hub's metrics).
        self.on_batch: Callable[[int], None] | None = None
        # Whether a write was refused for lack of disk space since a write that needs room
        # (``_probe_space``) last committed; how many were.
        self.full = False
        self._refused_full = 0

    # -- dialect hooks ----------------------------------------------------------------------
    def disk_full(self, exc: BaseException) -> bool:
        """Whether a driver error says the disk holding the database is full."""
        return False

    def where(self) -> str:
        """Where the data lives, for messages (never with a password)."""
        return self.dialect

    async def insert_rows(self, tx: SqlTx, pending: Rows, notifications: Notifications) -> None:
        """Insert a transaction's buffered rows (by table), one ``executemany`` per table, and
        send its ``notifications`` (which only PostgreSQL has)."""
        if notifications:
            raise StorageError(f"{self.dialect} has no NOTIFY: the cluster bus needs PostgreSQL")
        for name, rows in pending.items():
            await tx.insert_many(q.insert(name, tuple(rows[0])), rows)

    async def mark_alive(self, owner: str) -> None:
        self._owner = owner

    async def is_alive(self, owner: str) -> bool:
        # One process per store (SQLite's data root lock): any other hub id is a dead one.
        return owner == self._owner

    async def mark_delivered(self, tx: SqlTx, ids: list[str], at: datetime) -> list[str]:
        """Mark the pending ones of ``ids`` delivered; the ids marked. The transaction has sent
        whatever buffered mail it marks (``SqlTx.mark_delivered``)."""
        raise NotImplementedError

    async def take_inbox_positions(self, tx: SqlTx, counts: dict[str, int]) -> dict[str, int]:
        """Take ``counts[r]`` consecutive new positions in each recipient ``r``'s inbox, in
        ``tx``, so that no other transaction takes any before ``tx`` ends; the first of each."""
        raise NotImplementedError

    # -- lifecycle --------------------------------------------------------------------------
    async def open(self) -> None:
        raise NotImplementedError

    async def start_writers(self) -> None:
        for i in range(self.writer_count):
            self._writers.append(
                asyncio.create_task(self._writer_loop(), name=f"parley-writer-{i}")
            )

    async def close(self) -> None:
        self._closed = True
        for task in self._writers:
            task.cancel()
        for task in self._writers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._writers.clear()
        while not self._queue.empty():
            _, fut = self._queue.get_nowait()
            if not fut.done():
                fut.set_exception(self._closed_error())

    def _closed_error(self) -> StorageError:
        return StorageError("the store is closed: the hub is stopping, nothing more is written")

    # -- transactions -----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[SqlTx]:
        """A read-only transaction on a reader's connection."""
        try:
            async with self._read_transaction() as tx:
                yield tx
        except self.driver_errors as exc:
            if self.disk_full(exc):
                raise self.full_error("reading from") from exc
            raise StorageError(f"reading from the store failed: {exc}") from exc

    async def write(self, job: Job[T], *, eager: bool = False) -> T:
        """Run ``job`` in a write transaction (possibly batched with others) and return its
        result once committed (see ``Store.write`` for ``eager``)."""
        if self._closed:
            raise self._closed_error()
        if not self._writers:
            await self.start_writers()
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if eager and self.eager_writes and self._queue.empty() and not self._writing.locked():
            # Taking a free asyncio lock does not suspend: no batch can start in between.
            async with self._writing:
                await self._run_alone((job, fut))
            return fut.result()
        await self._queue.put((job, fut))
        return await fut

    async def _writer_loop(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            live = [(job, fut) for job, fut in batch if not fut.cancelled()]
            if not live:
                continue
            try:
                async with self._writing:
                    if len(live) == 1 or not await self._run_batch(live):
                        for item in live:
                            await self._run_alone(item)
            except asyncio.CancelledError:
                # The store is closing: what this batch has not committed never will be.
                for _, fut in live:
                    if not fut.done():
                        fut.set_exception(self._closed_error())
                raise

    async def _run_alone(self, item: tuple[Job[Any], asyncio.Future[Any]]) -> None:
        """Run one job in its own transaction, again if the database broke a deadlock or a
        serialization conflict by aborting it (PostgreSQL with several hubs)."""
        for attempt in range(TRANSIENT_RETRIES + 1):
            if await self._run_batch([item], final=attempt == TRANSIENT_RETRIES):
                return

    async def _run_batch(
        self, batch: list[tuple[Job[Any], asyncio.Future[Any]]], *, final: bool = True
    ) -> bool:
        """Run jobs in one transaction. Returns False (rolled back, nothing resolved) if a job
        failed inside a multi-job batch, so the caller can retry each alone, or if a lone job
        hit a transient conflict and this is not its ``final`` attempt."""
        results: list[Any] = []
        afters: list[Callable[[], Awaitable[None] | None]] = []
        try:
            # One transaction object for the whole batch, so the buffered inserts of all its
            # jobs go out as one executemany per table.
            async with self._write_transaction(batch=len(batch) > 1) as tx:
                for job, _ in batch:
                    results.append(await job(tx))
                await tx.finish()
                afters = tx.after
        except Exception as exc:
            if len(batch) > 1 or (not final and _transient(exc)):
                return False
            if self.disk_full(exc):
                if not self.full:
                    log.error(
                        "the store's disk is full (%s); writes are refused until it has room: %s",
                        self.where(),
                        exc,
                    )
                self.full = True
                self._refused_full += 1
            _, fut = batch[0]
            if not fut.done():
                fut.set_exception(self._wrap(exc))
            return True
        for (_, fut), result in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(result)
        if self.on_batch is not None:
            self.on_batch(len(batch))
        for callback in afters:
            try:
                outcome = callback()
                if outcome is not None:
                    await outcome
            except Exception:  # a failed publish never undoes a commit (C10 publish_failed)
                log.exception("after-commit callback failed")
        return True

    def full_error(self, doing: str) -> StorageFull:
        return StorageFull(
            f"{doing} the store failed: the disk holding it is full ({self.where()}). Nothing "
            "of this request was stored; free space there and retry: the hub takes writes "
            "again as soon as there is room, without a restart.",
            where=self.where(),
        )

    def _wrap(self, exc: BaseException) -> BaseException:
        if isinstance(exc, ParleyError):
            return exc
        if self.disk_full(exc):
            full = self.full_error("writing to")
            full.__cause__ = exc
            return full
        if isinstance(exc, self.driver_errors):
            err = StorageError(f"writing to the store failed: {exc.__class__.__name__}: {exc}")
            err.__cause__ = exc
            return err
        return exc

    async def _probe_space(self, tx: SqlTx) -> None:
        """Insert a row of ``PROBE_BYTES`` that does not compress, and delete it again before
        the commit: the transaction needs room on the disk as a write of that size does, and
        nobody ever sees the row."""
        probe = Event(
            id=f"probe-{new_ulid()}",
            type="store.probe",
            time=datetime.now(UTC),
            actor="system",
            subject="store",
            payload={"fill": secrets.token_hex(PROBE_BYTES // 2)},
        )
        tx.insert("events", probe)
        await tx.flush()
        await tx.delete("events", probe.id)

    async def refresh_search_index(self) -> None:
        """Nothing here: the database keeps its full-text index with every row (PostgreSQL);
        ``SqliteStore`` keeps its own."""

    async def storage_state(self) -> Literal["ok", "full"]:
        """``ok``, or ``full`` from the moment a write is refused for lack of disk space until
        a write that needs room (``_probe_space``, tried at each call meanwhile) commits. A
        nearly full disk may still take small writes: it stays ``full`` until it has room.
        Writes are tried all along, so each is taken as soon as it fits."""
        if not self.full:
            return "ok"
        refused = self._refused_full
        try:
            await self.write(self._probe_space)
        except StorageFull:
            return "full"
        except Exception:  # another failure says nothing about the disk
            log.exception("the storage probe failed")
            return "full"
        if self._refused_full == refused:  # none refused while the probe ran
            log.warning("the store has room again (%s)", self.where())
            self.full = False
        return "full" if self.full else "ok"

    def _write_transaction(self, *, batch: bool) -> contextlib.AbstractAsyncContextManager[SqlTx]:
        """Begins a write transaction on the writer's connection (for a ``batch`` of several
        jobs, or one job) and gives its transaction object; commits it, or rolls it back on
        error."""
        raise NotImplementedError

    def _read_transaction(self) -> contextlib.AbstractAsyncContextManager[SqlTx]:
        """A read transaction on a reader's connection, ended when it exits."""
        raise NotImplementedError
