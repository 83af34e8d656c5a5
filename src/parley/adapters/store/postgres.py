"""The scale-out store: PostgreSQL through asyncpg. Several hubs may share one database."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Integer, String, any_, bindparam, make_url, text, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from parley.adapters.store import migrate
from parley.adapters.store import schema as s
from parley.adapters.store.postgres_bulk import BulkStatements, pack_notifications
from parley.adapters.store.postgres_direct import DirectPostgres
from parley.adapters.store.sql import _PRINCIPALS, RECORD_TABLES, Notifications, Rows, SqlTx
from parley.adapters.store.sql_store import SqlStore, sqlstate
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
# Notifications through SQLAlchemy (``direct_statements`` off).
_NOTIFY_ALL = text(
    "SELECT count(pg_notify(c, p)) FROM unnest(CAST(:channels AS text[]), "
    "CAST(:payloads AS text[])) AS n(c, p)"
)
# Pending mail marked delivered, with the ids as one array: a statement built once that the
# writer runs directly (``postgres_direct``), as every live inbox stream marks what it sends.
MARK_DELIVERED = (
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
TAKE_INBOX_POSITIONS = (
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


class PostgresStore(SqlStore):
    """PostgreSQL store; rows are locked with SELECT … FOR UPDATE where order matters."""

    dialect = "postgresql"
    # One writer per hub: several writers of one process locked recipients' rows in different
    # orders and deadlocked under load (PostgreSQL breaks a deadlock only after 1 s); one
    # writer with group commit was faster as well. Hubs sharing the database still conflict
    # now and then, and such a job is retried (``SqlStore._run_alone``).
    writer_count = 1
    _liveness: AsyncConnection | None = None
    _write_engine: AsyncEngine | None = None
    _writer_conn: AsyncConnection | None = None
    _bulk_statements: BulkStatements | None = None
    _runner: DirectPostgres | None = None
    # Whether the writer runs its transactions, inserts and statements built once on asyncpg
    # directly (off: all through SQLAlchemy, as the equivalence tests compare).
    direct_statements = True

    def __init__(self, url: str, *, schema: str | None = None) -> None:
        """``schema``: the PostgreSQL schema that holds parley's tables (created if missing;
        ``PARLEY_DB_SCHEMA``), instead of the connection's first (``public``, or the first of
        the ``search_path`` the URL sets with ``?options=-csearch_path=…``)."""
        super().__init__(url)
        self._url = make_url(async_url(url))
        # libpq's ``options`` (``-c name=value …``) go to the server as asyncpg's startup
        # options; SQLAlchemy would hand the parameter to asyncpg's connect(), which has none.
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

    async def open(self) -> None:
        try:
            self.engine = create_async_engine(
                self._url,
                pool_size=10,
                max_overflow=10,
                connect_args={"server_settings": self._settings},
            )
            # The writer begins and ends its transactions itself (``_write_transaction``).
            self._write_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
            async with self.engine.connect() as conn:
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
        except StorageError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            if self.disk_full(exc):
                raise self.full_error("opening") from exc
            raise StorageError(f"could not open the PostgreSQL store: {exc}") from exc

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

    async def insert_rows(
        self, tx: SqlTx, pending: Rows, notifications: Notifications = ()
    ) -> None:
        """Every table's buffered rows and the notifications in one round trip
        (``postgres_bulk``); through SQLAlchemy, one statement per table and one for the
        notifications (``direct_statements`` off)."""
        if not isinstance(tx, WriterTx):
            await super().insert_rows(tx, pending)
            if notifications:
                channels, payloads = zip(*pack_notifications(notifications), strict=True)
                params = {"channels": list(channels), "payloads": list(payloads)}
                await tx.conn.execute(_NOTIFY_ALL, params)
            return
        if self._bulk_statements is None:
            self._bulk_statements = BulkStatements(RECORD_TABLES, tx.conn.dialect)
        sql, args = self._bulk_statements.build(pending, notifications)
        await tx.runner.run(sql, *args)

    async def take_inbox_positions(self, tx: SqlTx, counts: dict[str, int]) -> dict[str, int]:
        ids = sorted(counts)
        params = {"_ids": ids, "_counts": [counts[i] for i in ids]}
        result = await tx._exec_built(TAKE_INBOX_POSITIONS, params, reads=_PRINCIPALS)
        first = {row[0]: int(row[1]) for row in result.all()}
        if len(first) != len(ids):
            missing = [i for i in ids if i not in first]
            raise StorageError(f"no inbox for {missing}: the recipients do not exist")
        return first

    async def mark_delivered(self, tx: SqlTx, ids: list[str], at: datetime) -> list[str]:
        # No flush here: the transaction has sent whatever buffered mail it marks.
        result = await tx._exec_built(MARK_DELIVERED, {"_ids": ids, "_at": at}, reads=frozenset())
        return [row[0] for row in result.all()]

    @contextlib.asynccontextmanager
    async def _write_connection(self) -> AsyncIterator[AsyncConnection]:
        # The single writer keeps its connection (no pool checkout and reset per batch); a
        # broken one is replaced.
        assert self._write_engine is not None
        if not self.direct_statements:
            async with super()._write_connection() as pooled:
                yield pooled
            return
        conn = self._writer_conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._writer_conn = await self._write_engine.connect()
        yield conn

    @contextlib.asynccontextmanager
    async def _write_transaction(
        self, conn: AsyncConnection, *, batch: bool
    ) -> AsyncIterator[SqlTx]:
        """BEGIN and COMMIT go to asyncpg directly, on a connection SQLAlchemy runs in
        autocommit mode (so it sends no BEGIN of its own, and its statements join this
        transaction): through SQLAlchemy the BEGIN and a batch's lock timeout were two round
        trips, now one.

        A batch of several jobs locks their rows in the order the jobs came, and another hub's
        batch may lock the same rows in another order: a deadlock PostgreSQL breaks only after
        ``deadlock_timeout`` (1 s), three of them a second with three hubs under mail load. A
        batch instead gives up on a row lock it cannot get soon; its jobs are then run one by
        one (``SqlStore._run_batch``), and a lone job waits as long as it must."""
        if not self.direct_statements:
            async with super()._write_transaction(conn, batch=batch) as tx:
                if batch:
                    await tx.conn.exec_driver_sql(_LOCK_TIMEOUT)
                yield tx
            return
        conn, runner = await self._begin(conn, _BEGIN_BATCH if batch else _BEGIN)
        try:
            yield WriterTx(conn, self, runner)
            await runner.run("COMMIT")
        except BaseException:
            # The transaction must not outlive this batch on the kept connection: if it cannot
            # be rolled back (a cancel mid-statement, a lost server), the connection goes.
            try:
                await runner.driver.execute("ROLLBACK")
            except BaseException:
                await conn.invalidate()
            raise

    async def _begin(
        self, conn: AsyncConnection, begin: str
    ) -> tuple[AsyncConnection, DirectPostgres]:
        """Send ``begin`` on the kept connection. If that connection died while idle (the
        server restarted, an administrator or an idle timeout ended it), nothing has run yet:
        it is replaced and ``begin`` sent once more."""
        assert self._write_engine is not None
        runner = await self._runner_for(conn)
        try:
            await runner.run(begin)
            return conn, runner
        except DBAPIError:
            if not runner.driver.is_closed():
                raise
        with contextlib.suppress(Exception):
            await conn.close()
        conn = self._writer_conn = await self._write_engine.connect()
        runner = await self._runner_for(conn)
        await runner.run(begin)
        return conn, runner

    async def _runner_for(self, conn: AsyncConnection) -> DirectPostgres:
        """The runner of ``conn``'s asyncpg connection: a replaced writer connection gets one
        (and prepared statements) of its own."""
        driver = (await conn.get_raw_connection()).driver_connection
        if self._runner is None or self._runner.driver is not driver:
            self._runner = DirectPostgres(conn, driver)
        return self._runner

    def lock_row(self, stmt: Any) -> Any:
        return stmt.with_for_update()

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
        assert self.engine is not None
        await super().mark_alive(owner)
        conn = await self.engine.connect()
        await conn.execute(
            text("SELECT pg_advisory_lock(:ns, :key)"),
            {"ns": _LIVENESS_LOCKS, "key": _liveness_key(owner)},
        )
        await conn.commit()  # a session lock outlives the transaction; idle, not idle in tx
        self._liveness = conn

    async def is_alive(self, owner: str) -> bool:
        if owner == self._owner:
            return True
        assert self.engine is not None
        params = {"ns": _LIVENESS_LOCKS, "key": _liveness_key(owner)}
        async with self.engine.connect() as conn:
            free = await conn.execute(text("SELECT pg_try_advisory_lock(:ns, :key)"), params)
            if not free.scalar():
                return True
            await conn.execute(text("SELECT pg_advisory_unlock(:ns, :key)"), params)
            await conn.commit()
        return False

    async def close(self) -> None:
        if self._writer_conn is not None:
            with contextlib.suppress(Exception):
                await self._writer_conn.close()
            self._writer_conn = None
        self._runner = None
        if self._liveness is not None:
            with contextlib.suppress(Exception):
                await self._liveness.close()
            self._liveness = None
        await super().close()


class WriterTx(SqlTx):
    """A transaction of the writer: statements built once run on asyncpg directly."""

    def __init__(self, conn: AsyncConnection, store: SqlStore, runner: DirectPostgres) -> None:
        super().__init__(conn, store)
        self.runner = runner

    async def _exec_built(
        self, stmt: Any, params: dict[str, Any], *, reads: frozenset[str] | None = None
    ) -> Any:
        await self._flush_for(reads)
        return await self.runner.execute(stmt, params)
