"""The scale-out store: PostgreSQL through asyncpg. Several hubs may share one database.

Statements (``statements``) run on asyncpg itself: the writer's on one connection it keeps, in
transactions it begins and ends with its own statements; a read's on a connection of a pool, one
statement at a time (READ COMMITTED gives each statement its own snapshot, in a transaction or
not). A transaction's buffered inserts and notifications go out as one statement
(``postgres_bulk``). Alembic migrates the schema at open, through SQLAlchemy on a connection of
its own; nothing else uses SQLAlchemy's engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from sqlalchemy import Integer, String, any_, bindparam, make_url, text, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from parley.adapters.store import migrate
from parley.adapters.store import schema as s
from parley.adapters.store.postgres_bulk import BulkStatements
from parley.adapters.store.records import RECORD_TABLES
from parley.adapters.store.sql import Notifications, Rows, SqlTx
from parley.adapters.store.sql_store import SqlStore, sqlstate
from parley.adapters.store.statements import POSTGRES, Convert, Query, convert_rows
from parley.core.errors import ConfigError, StorageError

# SQLSTATE disk_full: the server could not extend a file (``could not extend file``).
_DISK_FULL = "53100"
# Any constant works; it only has to be the same for every hub migrating this database.
_MIGRATION_LOCK = 0x70617231
# A write transaction's start, in one round trip; a batch of several jobs waits at most this
# long for a row lock before it is run again job by job (see ``_write_transaction``).
_BEGIN = "BEGIN"
_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '50ms'"
_BEGIN_BATCH = f"{_BEGIN}; {_LOCK_TIMEOUT}"
# Readers' connections open at most (a pool of asyncpg's).
READERS_MAX = 20
_PRINCIPALS = frozenset({"principals"})
_ROWCOUNT = re.compile(r"(?:SELECT|UPDATE|DELETE|INSERT \d+|MERGE) (\d+)")
# Pending mail marked delivered, with the ids as one array, as every live inbox stream marks
# what it sends.
MARK_DELIVERED = Query(
    update(s.messages)
    .where(
        s.messages.c.id == any_(bindparam("_ids", type_=ARRAY(String))),
        s.messages.c.status == "pending",
    )
    .values(status="delivered", delivered_at=bindparam("_at"))
    .returning(s.messages.c.id)
)
# New positions in several inboxes in one statement: each recipient's row is locked in the
# order of the ids (two transactions taking positions in the same inboxes cannot deadlock), and
# held until the commit, so an inbox's positions follow the order its mail commits in.
TAKE_INBOX_POSITIONS = Query(
    text(
        "WITH wanted AS (SELECT * FROM unnest(CAST(:_ids AS text[]), CAST(:_counts AS integer[]))"
        " AS w(id, n)), locked AS MATERIALIZED (SELECT p.id FROM principals AS p JOIN wanted"
        " ON wanted.id = p.id ORDER BY p.id FOR UPDATE OF p)"
        " UPDATE principals SET inbox_seq = principals.inbox_seq + wanted.n"
        " FROM wanted, locked WHERE principals.id = wanted.id AND locked.id = wanted.id"
        " RETURNING principals.id, principals.inbox_seq - wanted.n + 1 AS first"
    )
    .bindparams(bindparam("_ids", type_=ARRAY(String)), bindparam("_counts", type_=ARRAY(Integer)))
    .columns(id=String, first=Integer)
)

# The namespace (first key) of the advisory locks that say a hub is alive.
_LIVENESS_LOCKS = 0x70617232


def _liveness_key(owner: str) -> int:
    """A hub id as the second key of its liveness lock (a signed 32-bit integer)."""
    return int.from_bytes(hashlib.blake2b(owner.encode(), digest_size=4).digest(), signed=True)


# The tables and views of the connection's current schema, less those an extension owns
# (PostGIS's spatial_ref_sys, say): what decides whether the schema is parley's.
_OWN_TABLES = text(
    "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
    " AND NOT EXISTS (SELECT 1 FROM pg_depend AS d WHERE d.classid = 'pg_class'::regclass"
    " AND d.objid = c.oid AND d.deptype = 'e')"
)


def _quoted(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _unquoted(name: str) -> str:
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return name[1:-1].replace('""', '"')
    return name


def async_url(url: str) -> str:
    """Normalise a PostgreSQL URL to the asyncpg driver."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    return url


class PgExecutor:
    """Runs statements on one asyncpg connection (asyncpg prepares each text once per
    connection and keeps it)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def execute(
        self, sql: str, args: Sequence[Any], outs: Sequence[Convert]
    ) -> tuple[list[tuple[Any, ...]], int]:
        if outs:
            rows = await self.conn.fetch(sql, *args)
            return convert_rows(rows, outs), len(rows)
        status = await self.conn.execute(sql, *args)
        count = _ROWCOUNT.match(status or "")
        return [], int(count.group(1)) if count else -1

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self.conn.executemany(sql, rows)


class PostgresStore(SqlStore):
    """PostgreSQL store; rows are locked with SELECT … FOR UPDATE where order matters."""

    dialect = "postgresql"
    # One writer per hub: several writers of one process locked recipients' rows in different
    # orders and deadlocked under load (PostgreSQL breaks a deadlock only after 1 s); one
    # writer with group commit was faster as well. Hubs sharing the database still conflict
    # now and then, and such a job is retried (``SqlStore._run_alone``).
    writer_count = 1
    compiler: Dialect = asyncpg_dialect.dialect()  # type: ignore[no-untyped-call]
    conv = POSTGRES
    driver_errors = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
    _liveness: asyncpg.Connection | None = None
    _writer: asyncpg.Connection | None = None
    _pool: asyncpg.Pool | None = None
    _bulk: BulkStatements | None = None

    def __init__(self, url: str, *, schema: str | None = None) -> None:
        """``schema``: the PostgreSQL schema that holds parley's tables (created if missing;
        ``PARLEY_DB_SCHEMA``), instead of the connection's first (``public``, or the first of
        the ``search_path`` the URL sets with ``?options=-csearch_path=…``)."""
        super().__init__(url)
        self._url = make_url(async_url(url))
        # libpq's ``options`` (``-c name=value …``) go to the server as asyncpg's startup
        # options (asyncpg's connect() takes no ``options`` parameter).
        options = self._url.query.get("options")
        if isinstance(options, tuple):
            raise ConfigError(f"the database URL sets options {len(options)} times; set it once")
        self._settings: dict[str, str] = {}
        if options:
            self._settings["options"] = options
            self._url = self._url.difference_update_query(["options"])
        if schema is not None:
            if "search_path" in (options or ""):
                raise ConfigError(
                    f"PARLEY_DB_SCHEMA={schema!r} and the database URL's search_path both say "
                    "where parley's tables go; keep one of them",
                    code="invalid_config",
                )
            self._settings["search_path"] = _quoted(schema)
        # Whether parley was told which schema is its own (then it creates it if missing).
        self._schema_given = schema is not None or "search_path" in (options or "")
        self.schema = "public"
        self._dsn = self._url.set(drivername="postgresql").render_as_string(hide_password=False)

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(self._dsn, server_settings=self._settings)

    async def open(self) -> None:
        self._closed = False
        try:
            await self._migrate()
            self._pool = await asyncpg.create_pool(
                self._dsn, min_size=0, max_size=READERS_MAX, server_settings=self._settings
            )
        except StorageError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            if self.disk_full(exc):
                raise self.full_error("opening") from exc
            raise StorageError(f"could not open the PostgreSQL store: {exc}") from exc

    async def _migrate(self) -> None:
        """Bring the schema to head: Alembic, through SQLAlchemy on a connection of its own."""
        engine = create_async_engine(
            self._url, poolclass=NullPool, connect_args={"server_settings": self._settings}
        )
        try:
            async with engine.connect() as conn:
                # Several hubs may start at once; one migrates, the others wait and find head.
                await conn.execute(text(f"SELECT pg_advisory_lock({_MIGRATION_LOCK})"))
                try:
                    await self._take_schema(conn)
                    await conn.run_sync(migrate.upgrade)
                    await conn.commit()
                finally:
                    # A failed step's transaction ends first: in it the unlock would fail too,
                    # and its error hide the step's (the lock is the session's, kept).
                    await conn.rollback()
                    await conn.execute(text(f"SELECT pg_advisory_unlock({_MIGRATION_LOCK})"))
                    await conn.commit()
        finally:
            await engine.dispose()

    async def _take_schema(self, conn: AsyncConnection) -> None:
        """Create the schema parley was given if it is missing, and refuse it if another
        application's tables are in it (``migrate.check_ours``)."""
        if self._schema_given:
            path = (await conn.execute(text("SHOW search_path"))).scalar_one()
            first = _unquoted(str(path).split(",")[0].strip())
            # Looked up first: CREATE SCHEMA IF NOT EXISTS asks for the right to create
            # schemas even when the schema exists (one an administrator made, say).
            found = await conn.execute(
                text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": first}
            )
            if first and first != "$user" and found.first() is None:
                await conn.execute(text(f"CREATE SCHEMA {_quoted(first)}"))
        schema = (await conn.execute(text("SELECT current_schema()"))).scalar()
        if schema is None:
            raise StorageError(
                "the database's search_path names no schema that exists, so parley has nowhere "
                "to put its tables; set PARLEY_DB_SCHEMA to give it one"
            )
        self.schema = str(schema)
        rows = await conn.execute(_OWN_TABLES)
        migrate.check_ours(
            {str(name) for (name,) in rows},
            f"{self.where()}",
            "Point PARLEY_DATABASE_URL at an empty database, or give parley a schema of its own "
            "in this one with PARLEY_DB_SCHEMA.",
        )

    async def insert_rows(self, tx: SqlTx, pending: Rows, notifications: Notifications) -> None:
        """Every table's buffered rows and the notifications in one round trip
        (``postgres_bulk``)."""
        assert isinstance(tx.executor, PgExecutor)
        if self._bulk is None:
            self._bulk = BulkStatements(RECORD_TABLES, self.compiler, self.conv)
        sql, args = self._bulk.build(pending, notifications)
        await tx.executor.conn.execute(sql, *args)

    async def take_inbox_positions(self, tx: SqlTx, counts: dict[str, int]) -> dict[str, int]:
        ids = sorted(counts)
        params = {"_ids": ids, "_counts": [counts[i] for i in ids]}
        result = await tx.run(TAKE_INBOX_POSITIONS, params, reads=_PRINCIPALS)
        first = {row[0]: int(row[1]) for row in result.all()}
        if len(first) != len(ids):
            missing = [i for i in ids if i not in first]
            raise StorageError(f"no inbox for {missing}: the recipients do not exist")
        return first

    async def mark_delivered(self, tx: SqlTx, ids: list[str], at: datetime) -> list[str]:
        # No flush here: the transaction has sent whatever buffered mail it marks.
        result = await tx.run(MARK_DELIVERED, {"_ids": ids, "_at": at}, reads=frozenset())
        return [row[0] for row in result.all()]

    async def notify(self, channel: str, payload: str) -> None:
        """Send a ``NOTIFY`` outside any write transaction."""
        if self._pool is None:
            raise StorageError("the PostgreSQL store is not open")
        async with self._pool.acquire() as conn:
            await conn.execute("SELECT pg_notify($1, $2)", channel, payload)

    @contextlib.asynccontextmanager
    async def _read_transaction(self) -> AsyncIterator[SqlTx]:
        if self._pool is None:
            raise StorageError("the PostgreSQL store is not open")
        async with self._pool.acquire() as conn:
            yield SqlTx(PgExecutor(conn), self)

    @contextlib.asynccontextmanager
    async def _write_transaction(self, *, batch: bool) -> AsyncIterator[SqlTx]:
        """BEGIN (with a batch's lock timeout, in the same round trip) and COMMIT go to the
        writer's connection as statements of their own.

        A batch of several jobs locks their rows in the order the jobs came, and another hub's
        batch may lock the same rows in another order: a deadlock PostgreSQL breaks only after
        ``deadlock_timeout`` (1 s), three of them a second with three hubs under mail load. A
        batch instead gives up on a row lock it cannot get soon; its jobs are then run one by
        one (``SqlStore._run_batch``), and a lone job waits as long as it must."""
        conn = await self._begin(_BEGIN_BATCH if batch else _BEGIN)
        try:
            yield SqlTx(PgExecutor(conn), self)
            await conn.execute("COMMIT")
        except BaseException:
            # The transaction must not outlive this batch on the kept connection: if it cannot
            # be rolled back (a cancel mid-statement, a lost server), the connection goes.
            try:
                await conn.execute("ROLLBACK")
            except BaseException:
                self._writer = None
                conn.terminate()
            raise

    async def _begin(self, begin: str) -> asyncpg.Connection:
        """Send ``begin`` on the kept connection. If that connection died while idle (the
        server restarted, an administrator or an idle timeout ended it), nothing has run yet:
        it is replaced and ``begin`` sent once more."""
        if self._pool is None:
            raise StorageError("the PostgreSQL store is not open")
        conn = self._writer
        if conn is None or conn.is_closed():
            conn = self._writer = await self._connect()
        try:
            await conn.execute(begin)
            return conn
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            if not conn.is_closed():
                raise
        conn = self._writer = await self._connect()
        await conn.execute(begin)
        return conn

    def disk_full(self, exc: BaseException) -> bool:
        return sqlstate(exc) == _DISK_FULL

    def where(self) -> str:
        parts = urlsplit(self.url)
        where = f"PostgreSQL {parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"
        return where if self.schema == "public" else f"{where}, schema {self.schema!r}"

    async def mark_alive(self, owner: str) -> None:
        """Hold a session advisory lock named after the hub on a connection of its own: the
        server releases it when that connection ends, so a hub killed with SIGKILL is seen dead
        at once, and no clock or lease has to be trusted."""
        await super().mark_alive(owner)
        conn = await self._connect()
        await conn.execute("SELECT pg_advisory_lock($1, $2)", _LIVENESS_LOCKS, _liveness_key(owner))
        self._liveness = conn

    async def is_alive(self, owner: str) -> bool:
        if owner == self._owner:
            return True
        if self._pool is None:
            raise StorageError("the PostgreSQL store is not open")
        key = (_LIVENESS_LOCKS, _liveness_key(owner))
        async with self._pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", *key):
                return True
            await conn.execute("SELECT pg_advisory_unlock($1, $2)", *key)
        return False

    async def close(self) -> None:
        await super().close()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.close()
            self._writer = None
        if self._liveness is not None:
            with contextlib.suppress(Exception):
                await self._liveness.close()
            self._liveness = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with contextlib.suppress(Exception):
                await pool.close()
