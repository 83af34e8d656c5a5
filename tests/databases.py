"""The databases the tests run on, made once per test process rather than once per test.

Migrating a new database costs a fifth of a second on SQLite and half a second on PostgreSQL
(with its CREATE and DROP DATABASE): more than many tests take themselves. So each test process
(each pytest-xdist worker, or the one process without it) migrates once:

- SQLite: a template file, migrated by the store itself; each test gets a copy of it.
- PostgreSQL: one database per process, migrated by the store itself. Before each test every
  table is emptied (the hub's connections of the test before are ended first), and after it the
  schema is compared with the one migrations made: a test that changed it fails, and the
  database is made anew for the next test.

A test that needs a database nothing has been done to — migrations from an old revision, a
foreign or too-new schema, another schema in the database, the modes of the files the store
creates — is marked ``fresh_database`` and gets an empty one of its own, as every test used to.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from parley.bootstrap import build_store
from parley.config import Settings
from parley.core.ids import new_ulid

PG_ADMIN_URL = os.environ.get("PARLEY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
SQLITE_FILE = "parley.db"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600

T = TypeVar("T")


def pg_dsn(db: str) -> str:
    """The URL of database ``db`` on the test server."""
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    return f"{base}/{db}"


def run_apart(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to the end on an event loop of its own in a thread of its own: for
    session-wide set-up, which must not touch the event loop of the test being set up."""
    result: list[T] = []
    failure: list[BaseException] = []

    def main() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=main, name="parley-test-databases")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


async def migrate(url: str, home: Path) -> None:
    """Bring the database at ``url`` to the newest schema the way a hub does: the store's own
    open, then close."""
    store = build_store(Settings(home=home, database_url=url))
    await store.open()
    await store.close()


async def admin(*statements: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def create_pg_database(prefix: str) -> str:
    name = f"{prefix}_{new_ulid().lower()}"
    await admin(f'CREATE DATABASE "{name}"')
    return name


async def drop_pg_database(name: str) -> None:
    await admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- SQLite ------------------------------------------------------------------------------------


@dataclass
class SqliteTemplate:
    """A migrated SQLite file; ``copy_to`` gives a test its own copy."""

    path: Path

    @classmethod
    def make(cls, where: Path) -> SqliteTemplate:
        home = where / "template-home"
        path = home / SQLITE_FILE
        run_apart(migrate(f"sqlite:///{path}", home))
        # Out of WAL mode, so the one file holds everything (the store puts a copy back in WAL
        # mode when it opens it, as it does a new database).
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA journal_mode=DELETE").fetchall()
        finally:
            conn.close()
        return cls(path)

    def copy_to(self, path: Path) -> None:
        """A copy at ``path``, in a private directory, private itself: what the store makes."""
        path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        shutil.copyfile(self.path, path)
        path.chmod(PRIVATE_FILE)


# -- PostgreSQL --------------------------------------------------------------------------------

_SCHEMA = """
SELECT md5(coalesce(string_agg(item, ';' ORDER BY item), '')) FROM (
    SELECT 'n:' || nspname AS item FROM pg_namespace
        WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
    UNION ALL
    SELECT 'c:' || table_schema || '.' || table_name || '.' || column_name || ':' || data_type
        || ':' || is_nullable || ':' || coalesce(column_default, '')
        FROM information_schema.columns
        WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
    UNION ALL
    SELECT 'i:' || schemaname || '.' || indexname || ':' || indexdef FROM pg_indexes
        WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
    UNION ALL
    SELECT 'v:' || version_num FROM alembic_version
) AS items
"""
"""A digest of the database's schemas, tables, columns, indexes and migration revision."""

_TABLES = """
SELECT quote_ident(table_name) FROM information_schema.tables
WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> 'alembic_version'
ORDER BY table_name
"""


class SchemaChanged(AssertionError):
    pass


class PostgresWorkerDatabase:
    """One migrated database for one test process, emptied before each test."""

    def __init__(self, worker: str, home: Path) -> None:
        self.prefix = f"parley_t_{worker}"
        self.home = home
        self.name = ""
        self.schema = ""
        self.tables: list[str] = []

    @property
    def url(self) -> str:
        return pg_dsn(self.name)

    async def create(self) -> None:
        self.name = await create_pg_database(self.prefix)
        await migrate(self.url, self.home)
        conn = await asyncpg.connect(self.url)
        try:
            self.schema = str(await conn.fetchval(_SCHEMA))
            self.tables = [str(name) for (name,) in await conn.fetch(_TABLES)]
            filled = [t for t in self.tables if await conn.fetchval(f"SELECT count(*) FROM {t}")]
        finally:
            await conn.close()
        # Emptying a table would lose rows a migration put there.
        assert filled == [], f"the migrations leave rows in {filled}: keep them between tests"

    async def drop(self) -> None:
        if self.name:
            await drop_pg_database(self.name)
            self.name = ""

    async def empty(self) -> None:
        """End every other connection to the database (a hub the test before left, or killed
        mid-transaction), then empty every table."""
        conn = await asyncpg.connect(self.url)
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            await conn.execute(f"TRUNCATE {', '.join(self.tables)} RESTART IDENTITY CASCADE")
        finally:
            await conn.close()

    async def check(self) -> None:
        """Raise SchemaChanged, and make the database anew, when the schema is not the one
        migrations made."""
        conn = await asyncpg.connect(self.url)
        try:
            schema = str(await conn.fetchval(_SCHEMA))
        finally:
            await conn.close()
        if schema != self.schema:
            await self.drop()
            await self.create()
            raise SchemaChanged(
                "the test changed the schema of the shared test database: mark it "
                "@pytest.mark.fresh_database to give it a database of its own"
            )
