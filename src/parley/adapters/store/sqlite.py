"""The embedded default store: SQLite in WAL mode on the ``sqlite3`` driver.

Only one hub may use a SQLite data root at a time: two writers sharing one file through separate
processes is how a peer project corrupted its store, so the second hub is refused at start by an
exclusive lock on ``<database>.lock``. Write transactions start with ``BEGIN IMMEDIATE`` so that
a transaction never has to upgrade a read lock to a write lock (the upgrade is where two SQLite
transactions deadlock into SQLITE_BUSY).

The one writer runs its statements on the event loop thread, on a ``sqlite3`` connection of its
own. A thread round trip per statement (100–250 µs on a busy two-core machine) made a discussion
turn's ten-odd statements cost milliseconds, while the statements themselves take microseconds in
WAL mode with ``synchronous=NORMAL``. This is safe only for the writer: it never waits on a lock
held by this process (readers in WAL mode take no write lock, and the data root lock keeps other
processes out), so blocking the loop while it works never blocks the work it waits for. Readers
run in threads of the store's own, one connection each, so that a large read never stalls the
loop; a read is one deferred transaction (one snapshot). So that the fsyncs of a WAL checkpoint
never stall the loop, checkpoints run in a thread of their own instead of inside the commit that
crosses the WAL's size limit. Alembic migrates the schema at open, through SQLAlchemy on a
connection of its own; nothing else uses SQLAlchemy's engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from sqlalchemy import JSON, bindparam, create_engine, event, func, literal_column, select, update
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Dialect
from sqlalchemy.pool import StaticPool

from parley.adapters.store import migrate
from parley.adapters.store import queries as q
from parley.adapters.store import schema as s
from parley.adapters.store import search as fts
from parley.adapters.store.sql import SqlTx
from parley.adapters.store.sql_store import SqlStore
from parley.adapters.store.statements import SQLITE, Convert, Query, convert_rows
from parley.core.errors import HubAlreadyRunning, StorageError
from parley.private_files import PRIVATE_DIR, PRIVATE_FILE, restrict, touch_private

BUSY_TIMEOUT_MS = 10_000
CHECKPOINT_S = 1.0
# Reader connections kept open, and open at most (more readers wait for one).
READERS_KEPT = 4
READERS_MAX = 12
# SQLite's result codes for a full disk: SQLITE_FULL (whose extended codes keep it in the low
# byte), and SQLITE_IOERR_SHMSIZE, an open that could not grow the WAL index (``-shm``) file.
_SQLITE_FULL = 13
_SQLITE_IOERR_SHMSIZE = 4874

log = logging.getLogger("parley.store")
R = TypeVar("R")


Synchronous = Literal["normal", "full"]
"""SQLite's ``synchronous`` settings a hub accepts (``Settings.sqlite_synchronous``)."""

# Pending mail marked delivered, and the ids it marked; the ids go in as one JSON list.
MARK_DELIVERED = Query(
    update(s.messages)
    .where(
        s.messages.c.id.in_(
            select(literal_column("value")).select_from(
                func.json_each(bindparam("_ids", type_=JSON))
            )
        ),
        s.messages.c.status == "pending",
    )
    .values(status="delivered", delivered_at=bindparam("_at"))
    .returning(s.messages.c.id)
)


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection with the store's settings. ``isolation_level=None``: the store begins and
    ends its transactions itself. ``check_same_thread=False``: a reader's connection is used by
    one thread at a time, not always the same one."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # NORMAL: a commit survives a crash of the process (the WAL is flushed at checkpoints);
        # FULL: it also survives losing power, at one fsync per commit (per batch of jobs).
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # see SqliteStore._checkpoints
    except BaseException:
        conn.close()
        raise
    return conn


class InlineExecutor:
    """Runs the writer's statements on the event loop thread: its coroutines complete without
    suspending, so a write transaction never yields to the loop midway."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def execute(
        self, sql: str, args: Sequence[Any], outs: Sequence[Convert]
    ) -> tuple[list[tuple[Any, ...]], int]:
        cursor = self.conn.execute(sql, args)
        rows = convert_rows(cursor.fetchall(), outs) if outs else []
        return rows, cursor.rowcount

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)


class ReaderExecutor:
    """Runs a read transaction's statements in a thread of the store's readers: the first one
    begins the (deferred) transaction in the same trip."""

    def __init__(self, conn: sqlite3.Connection, threads: ThreadPoolExecutor) -> None:
        self.conn = conn
        self.threads = threads
        self.begun = False
        # A statement still running in its thread after its caller was cancelled.
        self.abandoned: asyncio.Future[Any] | None = None

    async def _call(self, function: Callable[[], R]) -> R:
        running = asyncio.get_running_loop().run_in_executor(self.threads, function)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if not running.done():
                self.abandoned = running
            raise

    def _run(
        self, sql: str, args: Sequence[Any], outs: Sequence[Convert], begin: bool
    ) -> tuple[list[tuple[Any, ...]], int]:
        if begin:
            self.conn.execute("BEGIN")
        cursor = self.conn.execute(sql, args)
        rows = convert_rows(cursor.fetchall(), outs) if outs else []
        return rows, cursor.rowcount

    async def execute(
        self, sql: str, args: Sequence[Any], outs: Sequence[Convert]
    ) -> tuple[list[tuple[Any, ...]], int]:
        begin = not self.begun
        self.begun = True
        return await self._call(lambda: self._run(sql, args, outs, begin))

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        begin = not self.begun
        self.begun = True

        def run() -> None:
            if begin:
                self.conn.execute("BEGIN")
            self.conn.executemany(sql, rows)

        await self._call(run)


class _Readers:
    """The readers' connections: a few kept open, more opened while many readers wait."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        self.threads = ThreadPoolExecutor(READERS_MAX, thread_name_prefix="parley-read")
        self._idle: list[sqlite3.Connection] = []
        self._slots = asyncio.Semaphore(READERS_MAX)

    @contextlib.asynccontextmanager
    async def executor(self) -> AsyncIterator[ReaderExecutor]:
        async with self._slots:
            if self._idle:
                conn = self._idle.pop()
            else:
                opening = asyncio.get_running_loop().run_in_executor(
                    self.threads, _connect, self.path, self.synchronous
                )
                conn = await opening
            runner = ReaderExecutor(conn, self.threads)
            try:
                yield runner
            finally:
                self._release(runner)

    def _release(self, runner: ReaderExecutor) -> None:
        conn = runner.conn
        if runner.abandoned is not None:
            # Closed once its statement ends, never handed to another reader meanwhile.
            runner.abandoned.add_done_callback(lambda _: conn.close())
            return
        try:
            if conn.in_transaction:
                conn.rollback()  # a read transaction: only its snapshot is let go
        except sqlite3.Error:
            conn.close()
            return
        if len(self._idle) < READERS_KEPT:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        self.threads.shutdown(wait=True)


def _no_space(exc: BaseException) -> bool:
    """Whether a file of the store could not be written for lack of space (``ENOSPC``)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class SqliteStore(SqlStore):
    """SQLite store with one writer connection and a small pool of readers."""

    dialect = "sqlite"
    writer_count = 1
    eager_writes = True
    compiler: Dialect = sqlite_dialect.dialect()
    conv = SQLITE
    driver_errors = (sqlite3.Error,)

    def __init__(self, path: Path, *, synchronous: Synchronous = "normal") -> None:
        super().__init__(f"sqlite:///{path}")
        # SQLite silently takes a value it does not know for NORMAL: refuse it here instead.
        if synchronous not in get_args(Synchronous):
            raise ValueError(f"synchronous must be one of {get_args(Synchronous)}")
        self.path = path
        self.synchronous = synchronous
        self._lock_fd: int | None = None
        self._writer: sqlite3.Connection | None = None
        self._readers: _Readers | None = None
        self._checkpointer: asyncio.Task[None] | None = None
        self._inbox_seq: dict[str, int] = {}

    def disk_full(self, exc: BaseException) -> bool:
        for err in (exc, exc.__cause__):
            if isinstance(err, sqlite3.Error):
                code = getattr(err, "sqlite_errorcode", None)
                if isinstance(code, int):
                    return code & 0xFF == _SQLITE_FULL or code == _SQLITE_IOERR_SHMSIZE
        return False

    def where(self) -> str:
        return str(self.path)

    def _files(self) -> list[Path]:
        """The database file and the files SQLite and this store keep beside it."""
        return [self.path.with_name(self.path.name + end) for end in ("", "-wal", "-shm", ".lock")]

    def _acquire_lock(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise HubAlreadyRunning(
                f"another parley hub (pid {holder}) is already running on {self.path.parent}; "
                "stop it first, or give this hub its own data root with --home or PARLEY_HOME. "
                "Two hubs writing one SQLite file corrupt it; use PostgreSQL to run several hubs.",
                data_root=str(self.path.parent),
                pid=holder,
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError:
            os.close(fd)  # and with it the lock
            raise
        self._lock_fd = fd

    async def open(self) -> None:
        self._closed = False
        # A directory made here is private; an existing one is the data root (restricted at
        # build time) or a place the operator chose for the database.
        try:
            self.path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
            self._acquire_lock()
        except OSError as exc:
            if _no_space(exc):
                raise self.full_error("opening") from exc
            raise StorageError(f"could not open the SQLite store at {self.path}: {exc}") from exc
        try:
            self._check_ours()
            # SQLite gives a new WAL and shared-memory file the mode of the database file, so a
            # database created 0600 keeps every later WAL file private too; files an older
            # parley left open to others are restricted here.
            touch_private(self.path)
            for path in self._files():
                restrict(path)
            self._writer = _connect(self.path, self.synchronous)
            await asyncio.to_thread(self._migrate, self._writer)
            self._readers = _Readers(self.path, self.synchronous)
            self._checkpointer = asyncio.create_task(self._checkpoints(), name="parley-checkpoint")
        except Exception as exc:
            await self.close()
            if isinstance(exc, StorageError):
                raise
            if self.disk_full(exc) or _no_space(exc):
                raise self.full_error("opening") from exc
            raise StorageError(f"could not open the SQLite store at {self.path}: {exc}") from exc

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the schema to head: Alembic, through SQLAlchemy on the writer's connection
        (which stays open, as a store that opens holds its files), in a transaction begun with
        ``BEGIN IMMEDIATE`` as the writer's are."""
        engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
        event.listen(engine, "begin", lambda c: c.exec_driver_sql("BEGIN IMMEDIATE"))
        try:
            with engine.connect() as connection:
                migrate.upgrade(connection)
                connection.commit()
        finally:
            engine.dispose(close=False)

    def _check_ours(self) -> None:
        """Refuse a database file that another application made (``migrate.check_ours``),
        before parley changes anything in it: the writer's WAL mode would persist in it, and
        parley restricts its own files' modes. The look is a plain read, which recovers a WAL
        a crash left as any reader does (a read-only connection may not)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        conn = sqlite3.connect(self.path)
        try:
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite^_%' ESCAPE '^'"
            ).fetchall()
        finally:
            conn.close()
        migrate.check_ours(
            {str(name) for (name,) in rows},
            f"the SQLite database {str(self.path)!r}",
            "Give parley a file of its own: another data root (--home, PARLEY_HOME) or "
            "PARLEY_DATABASE_URL=sqlite:///<path>.",
        )

    async def refresh_search_index(self) -> None:
        """Index the rows stored since the last search (``search.catch_up``), in one write."""
        await self.write(fts.catch_up)

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
            self._checkpointer = None
        await super().close()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        if self._readers is not None:
            readers, self._readers = self._readers, None
            await asyncio.to_thread(readers.close)
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    async def _checkpoints(self) -> None:
        """Copy committed WAL frames into the database file every second, in a thread, on a
        connection of its own. PASSIVE never waits for the writer or for readers."""

        opened: list[sqlite3.Connection] = []

        def checkpoint() -> None:
            if not opened:
                opened.append(sqlite3.connect(self.path, check_same_thread=False))
            opened[0].execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

        try:
            while True:
                await asyncio.sleep(CHECKPOINT_S)
                running = asyncio.ensure_future(asyncio.to_thread(checkpoint))
                try:
                    await asyncio.shield(running)
                except asyncio.CancelledError:
                    # Let the checkpoint in flight end before its connection is closed.
                    with contextlib.suppress(Exception):
                        await running
                    raise
                except sqlite3.Error:
                    log.exception("WAL checkpoint failed; it is retried in %ss", CHECKPOINT_S)
        finally:
            for conn in opened:
                conn.close()

    def _writer_connection(self) -> sqlite3.Connection:
        # The single writer keeps its connection; one that could not be rolled back is replaced.
        if self._writer is None:
            if self._readers is None:
                raise StorageError("the SQLite store is not open")
            self._writer = _connect(self.path, self.synchronous)
        return self._writer

    @contextlib.asynccontextmanager
    async def _write_transaction(self, *, batch: bool) -> AsyncIterator[SqlTx]:
        raw = self._writer_connection()
        raw.execute("BEGIN IMMEDIATE")
        try:
            yield SqlTx(InlineExecutor(raw), self)
            raw.commit()
        except BaseException:
            self._roll_back(raw)
            raise

    def _roll_back(self, raw: sqlite3.Connection) -> None:
        """End a failed write transaction (a commit that failed on a full disk, say). A
        connection that cannot be rolled back is dropped and replaced."""
        try:
            raw.rollback()
        except Exception:
            log.exception("the writer's connection could not be rolled back; it is replaced")
            with contextlib.suppress(Exception):
                raw.close()
            self._writer = None

    @contextlib.asynccontextmanager
    async def _read_transaction(self) -> AsyncIterator[SqlTx]:
        if self._readers is None:
            raise StorageError("the SQLite store is not open")
        async with self._readers.executor() as runner:
            yield SqlTx(runner, self)

    async def mark_delivered(self, tx: SqlTx, ids: list[str], at: datetime) -> list[str]:
        result = await tx.run(MARK_DELIVERED, {"_ids": ids, "_at": at}, reads=frozenset())
        return [row[0] for row in result.all()]

    async def take_inbox_positions(self, tx: SqlTx, counts: dict[str, int]) -> dict[str, int]:
        # This process is the only writer of the file (see the lock above), so the inbox
        # positions can live in memory; a rolled-back batch only leaves a harmless gap.
        first: dict[str, int] = {}
        for recipient_id, count in counts.items():
            current = self._inbox_seq.get(recipient_id)
            if current is None:
                found = await tx.run(q.INBOX_TOP, {"_recipient": recipient_id})
                current = int(found.scalar_one())
            first[recipient_id] = current + 1
            self._inbox_seq[recipient_id] = current + count
        return first
