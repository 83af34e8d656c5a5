"""A database another application made is refused (``foreign_database``), and left as it was;
an empty one, or one parley made, is taken. On PostgreSQL parley shares a database through a
schema of its own (``PARLEY_DB_SCHEMA``, or the URL's ``search_path``), and two parleys in two
schemas of one database neither see nor hear each other."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from parley.adapters.bus.postgres import asyncpg_dsn
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import ForeignDatabase, StorageError
from parley.core.ids import new_ulid
from parley.core.mail import InboxFilter
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.mail.mailbox import SendRequest, inbox_topic
from parley.testing import FakeClock
from tests.conftest import PG_ADMIN_URL

# Other applications' tables and schemas go into the database.
pytestmark = pytest.mark.fresh_database

ORDERS = [(1, "42 chairs"), (2, "3 tables")]


async def foreign_tables(database_url: str, *statements: str) -> None:
    """Run another application's SQL in the database."""
    if database_url.startswith("sqlite:///"):
        path = Path(database_url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as conn:
            for statement in statements:
                conn.execute(statement)
        return
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def rows(database_url: str, query: str) -> list[tuple[Any, ...]]:
    if database_url.startswith("sqlite:///"):
        with sqlite3.connect(Path(database_url.removeprefix("sqlite:///"))) as conn:
            return [tuple(r) for r in conn.execute(query).fetchall()]
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def tables(database_url: str, schema: str = "public") -> set[str]:
    if database_url.startswith("sqlite:///"):
        found = await rows(database_url, "SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        found = await rows(
            database_url,
            f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}'",
        )
    return {name for (name,) in found}


async def an_orders_app(database_url: str) -> None:
    await foreign_tables(
        database_url,
        "CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL)",
        *(f"INSERT INTO orders VALUES ({n}, '{item}')" for n, item in ORDERS),
    )


async def refused(settings: Settings, clock: FakeClock) -> ForeignDatabase:
    hub = build_hub(settings, clock=clock)
    with pytest.raises(ForeignDatabase) as info:
        await hub.start(background=False)
    await hub.stop()
    return info.value


async def test_a_database_another_application_made_is_refused_and_left_as_it_was(
    settings: Settings, database_url: str, clock: FakeClock
) -> None:
    await an_orders_app(database_url)

    error = await refused(settings, clock)
    assert error.code == "foreign_database"
    assert "'orders'" in error.message
    assert "did not create" in error.message
    assert error.details["tables"] == ["orders"]
    # Nothing was added beside the other application's table, nor changed in it.
    assert await tables(database_url) == {"orders"}
    assert await rows(database_url, "SELECT id, item FROM orders ORDER BY id") == ORDERS
    if database_url.startswith("sqlite:///"):
        # Still in the other application's journal mode: the writer's WAL would persist.
        assert await rows(database_url, "PRAGMA journal_mode") == [("delete",)]


async def test_another_alembic_applications_database_is_foreign_not_too_new(
    settings: Settings, database_url: str, clock: FakeClock
) -> None:
    await foreign_tables(
        database_url,
        "CREATE TABLE alembic_version (version_num varchar(32) NOT NULL PRIMARY KEY)",
        "INSERT INTO alembic_version VALUES ('ae1027a6acf')",
        "CREATE TABLE users (id integer PRIMARY KEY)",
    )
    error = await refused(settings, clock)
    assert error.code == "foreign_database"
    assert await tables(database_url) == {"alembic_version", "users"}


async def test_a_database_parley_made_stays_parleys_with_other_tables_added_later(
    settings: Settings, database_url: str, clock: FakeClock
) -> None:
    first = build_hub(settings, clock=clock)
    await first.start(background=False)
    await first.stop()
    await an_orders_app(database_url)

    again = build_hub(settings, clock=clock)
    await again.start(background=False)
    await again.stop()


async def start(settings: Settings, clock: FakeClock) -> Hub:
    hub = build_hub(settings, clock=clock)
    await hub.start(background=False)
    return hub


async def test_parley_shares_a_database_through_a_schema_of_its_own(
    postgres_only: None, settings: Settings, database_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    await an_orders_app(database_url)
    by_setting = settings.model_copy(update={"db_schema": "parley"})
    by_url = settings.model_copy(
        update={
            "home": tmp_path / "second",
            "database_url": f"{database_url}?options=-csearch_path%3Dsecond_parley",
        }
    )
    one = await start(by_setting, clock)
    try:
        two = await start(by_url, clock)
        try:
            await share_one_database(one, two)
        finally:
            await two.stop()
    finally:
        await one.stop()
    # The other application's table is untouched; each parley's tables are in its schema.
    assert await tables(database_url) == {"orders"}
    assert await rows(database_url, "SELECT id, item FROM orders ORDER BY id") == ORDERS
    assert {"alembic_version", "principals", "messages"} <= await tables(database_url, "parley")
    assert {"alembic_version", "principals"} <= await tables(database_url, "second_parley")

    # Started again, each finds its own schema parley's.
    for again in (by_setting, by_url):
        hub = await start(again, clock)
        await hub.stop()


async def share_one_database(one: Hub, two: Hub) -> None:
    """Each hub has its own operator and agents; mail to an agent both have reaches only the
    hub it was sent through, on the store and on the bus."""
    assert one.operator_token is not None and two.operator_token is not None
    operators = [await hub.identity.authenticate(hub.operator_token) for hub in (one, two)]
    agents = [
        (await hub.identity.create_agent(op, AgentSpec(id="alice"))).principal
        for hub, op in zip((one, two), operators, strict=True)
    ]
    await one.identity.create_agent(operators[0], AgentSpec(id="only-in-one"))
    assert await two.identity.get("only-in-one") is None

    heard = two.bus.subscribe([inbox_topic("alice")])
    try:
        # Sent through one first: were the hubs on one notification channel, two's
        # subscriber would hear it before its own hub's mail.
        request = SendRequest(to="alice", kind="info", subject="from one")
        await one.mail.send(agents[0], request)
        sent = await two.mail.send(agents[1], request.model_copy(update={"subject": "from two"}))
        event = await asyncio.wait_for(heard.get(), 10)
        assert event["message"]["id"] == sent.message.id, event
    finally:
        await heard.close()
    inbox = await two.mail.inbox_page(operators[1], "alice", InboxFilter(limit=100))
    assert [m.subject for m in inbox.rows] == ["from two"]


async def test_a_schema_an_administrator_made_serves_a_role_that_may_not_create_schemas(
    postgres_only: None, settings: Settings, database_url: str, clock: FakeClock
) -> None:
    role = f"parley_r_{new_ulid().lower()}"
    admin = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN")
    finally:
        await admin.close()
    try:
        await an_orders_app(database_url)
        await foreign_tables(database_url, f"CREATE SCHEMA parley_own AUTHORIZATION {role}")
        as_role = database_url.replace("://postgres@", f"://{role}@", 1)
        assert as_role != database_url
        # A schema it may not create: refused with the server's reason, not a later error.
        hub = build_hub(
            settings.model_copy(update={"database_url": as_role, "db_schema": "missing"}),
            clock=clock,
        )
        with pytest.raises(StorageError, match="permission denied"):
            await hub.start(background=False)
        await hub.stop()
        hub = await start(
            settings.model_copy(update={"database_url": as_role, "db_schema": "parley_own"}), clock
        )
        await hub.stop()
        assert "principals" in await tables(database_url, "parley_own")
    finally:
        await foreign_tables(database_url, f"DROP OWNED BY {role}")
        admin = await asyncpg.connect(PG_ADMIN_URL)
        try:
            await admin.execute(f"DROP ROLE {role}")
        finally:
            await admin.close()
