"""The embedded default store: SQLite in WAL mode through aiosqlite.

Only one hub may use a SQLite data root at a time: two writers sharing one file through separate
processes is how a peer project corrupted its store, so the second hub is refused at start by an
exclusive lock on ``<database>.lock``. Write transactions start with ``BEGIN IMMEDIATE`` so that
a transaction never has to upgrade a read lock to a write lock (the upgrade is where two SQLite
transactions deadlock into SQLITE_BUSY).

The writer runs its statements on the event loop (see ``sqlite_inline``); so that the fsyncs of a
WAL checkpoint never stall the loop, checkpoints run in a thread of their own instead of inside
the commit that crosses the WAL's size limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import logging
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal, get_args

from sqlalchemy import event, func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from parley.adapters.store import migrate
from parley.adapters.store import schema as s
from parley.adapters.store.sql import SqlTx
from parley.adapters.store.sql_store import SqlStore
from parley.adapters.store.sqlite_direct import DirectSqlite
from parley.adapters.store.sqlite_inline import InlineConnection, inline_creator
from parley.core.errors import HubAlreadyRunning, StorageError
from parley.private_files import PRIVATE_DIR, PRIVATE_FILE, restrict, touch_private

BUSY_TIMEOUT_MS = 10_000
CHECKPOINT_S = 1.0
# SQLite's result codes for a full disk: SQLITE_FULL (whose extended codes keep it in the low
# byte), and SQLITE_IOERR_SHMSIZE, an open that could not grow the WAL index (``-shm``) file.
_SQLITE_FULL = 13
_SQLITE_IOERR_SHMSIZE = 4874

log = logging.getLogger("parley.store")


Synchronous = Literal["normal", "full"]
"""SQLite's ``synchronous`` settings a hub accepts (``Settings.sqlite_synchronous``)."""


def _pragmas(dbapi_conn: Any, _record: Any, *, synchronous: str) -> None:
    # Let SQLAlchemy's begin event decide how transactions start (see _begin_*).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # NORMAL: a commit survives a crash of the process (the WAL is flushed at checkpoints);
    # FULL: it also survives losing power, at one fsync per commit (per batch of jobs).
    cur.execute(f"PRAGMA synchronous={synchronous.upper()}")
    cur.execute("PRAGMA wal_autocheckpoint=0")  # see SqliteStore._checkpoints
    cur.close()


def _begin_immediate(conn: Any) -> None:
    # A write batch begins its transaction on the sqlite3 connection itself (see
    # SqliteStore._write_transaction); a statement SQLAlchemy runs in it joins that transaction.
    if not conn.connection.driver_connection.in_transaction:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _begin_deferred(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN")


def _engine(path: Path, *, writer: bool, synchronous: str) -> AsyncEngine:
    # The one writer runs its statements on the loop thread (see sqlite_inline for why that is
    # safe); readers keep aiosqlite's threads so that a large read never stalls the loop.
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{path}",
        pool_size=1 if writer else 4,
        max_overflow=0 if writer else 8,
        **({"async_creator": inline_creator(path)} if writer else {}),
    )
    event.listen(
        engine.sync_engine, "connect", functools.partial(_pragmas, synchronous=synchronous)
    )
    event.listen(engine.sync_engine, "begin", _begin_immediate if writer else _begin_deferred)
    return engine


def _no_space(exc: BaseException) -> bool:
    """Whether a file of the store could not be written for lack of space (``ENOSPC``)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class SqliteStore(SqlStore):
    """SQLite store with one writer connection and a small pool of readers."""

    dialect = "sqlite"
    writer_count = 1
    eager_writes = True

    def __init__(self, path: Path, *, synchronous: Synchronous = "normal") -> None:
        super().__init__(f"sqlite:///{path}")
        # SQLite silently takes a value it does not know for NORMAL: refuse it here instead.
        if synchronous not in get_args(Synchronous):
            raise ValueError(f"synchronous must be one of {get_args(Synchronous)}")
        self.path = path
        self.synchronous = synchronous
        self._lock_fd: int | None = None
        self._write_engine: AsyncEngine | None = None
        self._writer_conn: AsyncConnection | None = None
        self._checkpointer: asyncio.Task[None] | None = None
        self._inbox_seq: dict[str, int] = {}
        # Whether the writer runs its statements built once directly (see sqlite_direct).
        self.direct_statements = True
        self._direct: DirectSqlite | None = None

    def disk_full(self, exc: BaseException) -> bool:
        for err in (getattr(exc, "orig", None), exc, exc.__cause__):
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
            self._write_engine = _engine(self.path, writer=True, synchronous=self.synchronous)
            async with self._write_engine.connect() as conn:
                await conn.run_sync(migrate.upgrade)
                await conn.commit()
            self.engine = _engine(self.path, writer=False, synchronous=self.synchronous)
            self._checkpointer = asyncio.create_task(self._checkpoints(), name="parley-checkpoint")
        except Exception as exc:
            await self.close()
            if isinstance(exc, StorageError):
                raise
            if self.disk_full(exc) or _no_space(exc):
                raise self.full_error("opening") from exc
            raise StorageError(f"could not open the SQLite store at {self.path}: {exc}") from exc

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

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
            self._checkpointer = None
        await super().close()
        if self._writer_conn is not None:
            with contextlib.suppress(Exception):
                await self._writer_conn.close()
            self._writer_conn = None
        self._direct = None
        if self._write_engine is not None:
            await self._write_engine.dispose()
            self._write_engine = None
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

    @contextlib.asynccontextmanager
    async def _write_connection(self) -> AsyncIterator[AsyncConnection]:
        # The single writer keeps its connection: a pool checkout and return per batch cost
        # more than a small batch's own statements. A broken connection is replaced.
        assert self._write_engine is not None
        conn = self._writer_conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._writer_conn = await self._write_engine.connect()
        yield conn

    def _driver(self, conn: AsyncConnection) -> sqlite3.Connection:
        driver = conn.sync_connection.connection.driver_connection  # type: ignore[union-attr]
        assert isinstance(driver, InlineConnection)
        return driver._conn

    @contextlib.asynccontextmanager
    async def _write_transaction(
        self, conn: AsyncConnection, *, batch: bool
    ) -> AsyncIterator[SqlTx]:
        # BEGIN and COMMIT on the sqlite3 connection: through SQLAlchemy they cost a statement's
        # overhead each. A statement SQLAlchemy runs inside starts its own transaction object
        # (the begin listener sees SQLite's transaction open), which then ends this one.
        if not self.direct_statements:
            try:
                async with super()._write_transaction(conn, batch=batch) as tx:
                    yield tx
            except BaseException:
                await self._roll_back(conn, self._driver(conn))
                raise
            return
        raw = self._driver(conn)
        # A replaced writer connection gets a runner of its own.
        if self._direct is None or self._direct.conn is not raw:
            self._direct = DirectSqlite(raw, conn.dialect)
        try:
            raw.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise DBAPIError.instance("BEGIN IMMEDIATE", (), exc, sqlite3.Error) from exc
        try:
            yield SqlTx(conn, self, self._direct)
            # SQLAlchemy's transaction commits the sqlite3 connection's; then nothing is left.
            if conn.in_transaction():
                await conn.commit()
            try:
                raw.commit()
            except sqlite3.Error as exc:
                raise DBAPIError.instance("COMMIT", (), exc, sqlite3.Error) from exc
        except BaseException:
            await self._roll_back(conn, raw)
            raise

    async def _roll_back(self, conn: AsyncConnection, raw: sqlite3.Connection) -> None:
        """End a failed write transaction on both layers. SQLAlchemy keeps a transaction whose
        commit failed (a full disk) until it is rolled back, and refuses every later statement
        on the connection meanwhile (``PendingRollbackError``): the writer would be wedged
        until a restart. A connection that cannot be rolled back is dropped and replaced."""
        try:
            await conn.rollback()
            raw.rollback()
        except Exception:
            log.exception("the writer's connection could not be rolled back; it is replaced")
            with contextlib.suppress(Exception):
                await conn.invalidate()

    async def take_inbox_positions(self, tx: SqlTx, counts: dict[str, int]) -> dict[str, int]:
        # This process is the only writer of the file (see the lock above), so the inbox
        # positions can live in memory; a rolled-back batch only leaves a harmless gap.
        first: dict[str, int] = {}
        for recipient_id, count in counts.items():
            current = self._inbox_seq.get(recipient_id)
            if current is None:
                m = s.messages.c
                stmt = select(func.coalesce(func.max(m.seq), 0)).where(
                    m.recipient_id == recipient_id
                )
                current = int((await tx._exec(stmt)).scalar_one())
            first[recipient_id] = current + 1
            self._inbox_seq[recipient_id] = current + count
        return first
