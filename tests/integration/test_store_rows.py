"""Every record type stored and read back through the store's one SQL path
(``adapters/store/statements.py`` on ``sqlite3`` and ``asyncpg``, and on PostgreSQL the
one-statement inserts of ``postgres_bulk.py``), byte for byte as SQLAlchemy's own execution
stores it: a database an earlier parley wrote through SQLAlchemy reads back the same, and the
other way round."""

from __future__ import annotations

import enum
import sqlite3
import types
import typing
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from sqlalchemy import create_engine, select
from sqlalchemy.dialects.sqlite import base as sqlite_types
from sqlalchemy.dialects.sqlite.pysqlite import dialect as pysqlite
from sqlalchemy.ext.asyncio import create_async_engine

from parley.adapters.bus.postgres import asyncpg_dsn
from parley.adapters.store import schema as s
from parley.adapters.store.postgres import PostgresStore, async_url
from parley.adapters.store.records import RECORDS, to_row
from parley.adapters.store.sql import SqlTx
from parley.adapters.store.sqlite import SqliteStore
from parley.adapters.store.statements import SQLITE
from parley.core.errors import StorageError
from parley.core.ports import Tx
from parley.service.hub import Hub

_RECORDS = RECORDS
NAMES = sorted(RECORDS)
# Microseconds and a timezone; the offset variant is stored as SQLAlchemy stores it (wall clock).
UTC_TS = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
OFFSET_TS = datetime(2026, 3, 4, 5, 6, 7, 654321, tzinfo=timezone(timedelta(hours=5, minutes=30)))
ANY_JSON = {"text": "é ✓", "n": [1, 2.5, True, False, None], "nested": {"empty": []}}


def _sample(annotation: Any, *, ts: datetime, nulls: bool, salt: int) -> Any:
    """A valid value of ``annotation``: None where it allows None and ``nulls`` is set; ``salt``
    keeps the values of unique columns apart."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _sample(args[0], ts=ts, nulls=nulls, salt=salt)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and nulls:
            return None
        return _sample(next(a for a in args if a is not type(None)), ts=ts, nulls=nulls, salt=salt)
    if origin is typing.Literal:
        return args[-1]
    if origin in (list, tuple, set, frozenset):
        return (
            [_sample(args[0], ts=ts, nulls=nulls, salt=salt) for _ in range(2)] if args else ["x"]
        )
    if origin is dict:
        return {"k": _sample(args[1], ts=ts, nulls=nulls, salt=salt)} if args else dict(ANY_JSON)
    if annotation is Any:
        return dict(ANY_JSON)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation, ts=ts, nulls=nulls, salt=salt)
    return _scalar(annotation, ts=ts, salt=salt)


def _scalar(annotation: Any, *, ts: datetime, salt: int) -> Any:
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return list(annotation)[-1]
        if issubclass(annotation, bool):
            return True
        if issubclass(annotation, int):
            return 7 + salt
        if issubclass(annotation, float):
            return 2.5
        if issubclass(annotation, datetime):
            return ts
        if issubclass(annotation, str):
            return f"v é {salt}"
    raise AssertionError(f"no sample for {annotation!r}")


def _model(model: type[BaseModel], *, ts: datetime, nulls: bool, salt: int) -> dict[str, Any]:
    # A constrained field keeps its default: the sample values know no bounds.
    return {
        field: _sample(info.annotation, ts=ts, nulls=nulls, salt=salt)
        for field, info in model.model_fields.items()
        if info.is_required() or not info.metadata
    }


def _record(name: str, key: str, *, ts: datetime, nulls: bool, salt: int = 0) -> BaseModel:
    _table, model = _RECORDS[name]
    data = _model(model, ts=ts, nulls=nulls, salt=salt)
    data["id"] = key
    return model.model_validate(data)


def _same(a: BaseModel, b: BaseModel) -> None:
    """Equal but for the id and what is not a column (a channel's members live elsewhere)."""
    columns = _RECORDS[_name_of(a)][0].columns
    keep = {field for field in type(a).model_fields if field in columns and field != "id"}
    assert a.model_dump(include=keep) == b.model_dump(include=keep)


def _name_of(record: BaseModel) -> str:
    return next(name for name, (_table, model) in _RECORDS.items() if type(record) is model)


class Paths:
    """Writes and reads of one hub's store, and the same through SQLAlchemy's own execution on
    the same database (the reference)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        store = hub.store
        assert isinstance(store, (SqliteStore, PostgresStore))
        self.store = store
        self.sqlite = store if isinstance(store, SqliteStore) else None

    async def write(self, job: Any) -> Any:
        return await self.hub.store.write(job)

    async def insert(self, name: str, record: BaseModel) -> None:
        async def job(tx: Tx) -> None:
            tx.insert(name, record)

        await self.write(job)

    async def get(self, name: str, key: str) -> Any:
        """Read back by the writer and by a reader: both the same."""

        async def job(tx: Tx) -> Any:
            return await tx.get(name, key)

        written = await self.write(job)
        async with self.hub.store.read() as tx:
            read = await tx.get(name, key)
        assert (written is None) == (read is None)
        if written is not None:
            _same(written, read)
        return written

    async def delete(self, name: str, key: str) -> None:
        async def job(tx: Tx) -> None:
            await tx.delete(name, key)

        await self.write(job)

    async def update(self, name: str, key: str, values: dict[str, Any]) -> int:
        async def job(tx: Tx) -> int:
            return await tx.update(name, key, **values)

        return int(await self.write(job))

    async def reference(self, statement: Any, params: Any = None) -> list[dict[str, Any]]:
        """Run ``statement`` through SQLAlchemy's engine (its own type processing) and commit;
        the rows it returned, as mappings."""
        if self.sqlite is not None:
            engine = create_engine(f"sqlite:///{self.sqlite.path}")
            try:
                with engine.begin() as conn:
                    result = conn.execute(statement, params)
                    return [dict(r) for r in result.mappings()] if result.returns_rows else []
            finally:
                engine.dispose()
        aengine = create_async_engine(async_url(self.store.url))
        try:
            async with aengine.begin() as aconn:
                aresult = await aconn.execute(statement, params)
                return [dict(r) for r in aresult.mappings()] if aresult.returns_rows else []
        finally:
            await aengine.dispose()

    async def stored(self, name: str, key: str) -> Any:
        """The row as the database holds it: SQLite's values unprocessed, PostgreSQL's as the
        server renders the row in JSON."""
        if self.sqlite is None:
            conn = await asyncpg.connect(asyncpg_dsn(self.store.url))
            try:
                sql = f"SELECT row_to_json(t)::text FROM {name} t WHERE id = $1"
                return await conn.fetchval(sql, key)
            finally:
                await conn.close()
        conn = sqlite3.connect(self.sqlite.path)
        try:
            return conn.execute(f"SELECT * FROM {name} WHERE id = ?", (key,)).fetchone()
        finally:
            conn.close()


VARIANTS = {"utc": (UTC_TS, False), "offset": (OFFSET_TS, False), "nulls": (UTC_TS, True)}


@pytest.mark.parametrize("name", NAMES)
async def test_a_record_is_stored_and_read_back_as_sqlalchemy_stores_and_reads_it(
    hub: Hub, name: str
) -> None:
    paths = Paths(hub)
    table, _ = RECORDS[name]
    for salt, (variant, (ts, nulls)) in enumerate(VARIANTS.items()):
        key = f"{variant}-key"
        original = _record(name, key, ts=ts, nulls=nulls, salt=salt)
        # Stored by the store, then by SQLAlchemy: the same row; each read back by both.
        await paths.insert(name, original)
        ours = await paths.stored(name, key)
        read = await paths.get(name, key)
        by_reference = await paths.reference(select(table).where(table.c.id == key))
        await paths.delete(name, key)
        await paths.reference(table.insert(), [to_row(name, original)])
        assert await paths.stored(name, key) == ours, variant
        _same(await paths.get(name, key), read)
        assert by_reference == await paths.reference(select(table).where(table.c.id == key))
        if variant != "offset":
            # SQLite keeps a timestamp's wall clock: an offset one reads back as that time in UTC.
            _same(read, original)

        # Every column updated at once, to another variant's values, by the store and by
        # SQLAlchemy: the same row.
        other_variant = "nulls" if variant != "nulls" else "offset"
        other_ts, other_nulls = VARIANTS[other_variant]
        other = _record(name, "unused", ts=other_ts, nulls=other_nulls, salt=9)
        values, first = to_row(name, other), to_row(name, original)
        # ``name`` and ``key`` are the parameters of ``Tx.update`` itself.
        for column in ("id", "name", "key"):
            values.pop(column, None)
            first.pop(column, None)
        assert await paths.update(name, key, values) == 1
        updated = await paths.stored(name, key)
        changed = await paths.get(name, key)
        if other_variant != "offset":
            fields = {f for f in values if f in type(other).model_fields}
            assert changed.model_dump(include=fields) == other.model_dump(include=fields)
        assert await paths.update(name, key, first) == 1
        assert await paths.stored(name, key) == ours
        await paths.reference(table.update().where(table.c.id == key).values(**values))
        assert await paths.stored(name, key) == updated, variant
        assert updated != ours, variant
        assert await paths.update(name, "missing", values) == 0
        await paths.delete(name, key)


async def test_a_refused_statement_raises_a_storage_error_with_the_drivers_cause(
    hub: Hub,
) -> None:
    paths = Paths(hub)
    record = _record("events", "dup", ts=UTC_TS, nulls=False)
    await paths.insert("events", record)
    with pytest.raises(StorageError) as raised:
        await paths.insert("events", record)
    cause = raised.value.__cause__
    assert isinstance(cause, (sqlite3.IntegrityError, asyncpg.UniqueViolationError))


@pytest.mark.parametrize("mixed", [True, False], ids=["built-per-call", "built-once"])
async def test_a_transaction_commits_or_rolls_back_all_its_statements(
    hub: Hub, mixed: bool
) -> None:
    """Statements built once and built for the run share one transaction: both commit, or a
    failure rolls both back, and the writer goes on working after either."""
    paths = Paths(hub)
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

    class Refused(Exception):
        pass

    async def job(tx: Tx, key: str, *, fail: bool) -> None:
        assert isinstance(tx, SqlTx)
        tx.insert("events", _record("events", key, ts=UTC_TS, nulls=False))
        await tx.insert_token(f"hash-{key}", "someone", "label", at)
        if mixed:
            await tx.execute(
                s.tokens.update().where(s.tokens.c.hash == f"hash-{key}").values(label="x")
            )
        assert await tx.get("events", key) is not None  # flushes the insert first
        if fail:
            raise Refused(key)

    with pytest.raises(Refused):
        await paths.write(lambda tx: job(tx, "failed", fail=True))
    await paths.write(lambda tx: job(tx, "kept", fail=False))
    assert await paths.get("events", "failed") is None
    assert await paths.get("events", "kept") is not None
    async with hub.store.read() as tx:
        assert isinstance(tx, SqlTx)
        tokens = s.tokens.c
        found = (await tx.execute(select(tokens.hash, tokens.label).order_by(tokens.hash))).all()
        label = "x" if mixed else "label"
        assert [r for r in found if r[0].startswith("hash-")] == [("hash-kept", label)]


@given(
    value=st.one_of(
        st.none(),
        st.dates(),
        st.datetimes(),
        st.datetimes(timezones=st.timezones()),
    )
)
def test_timestamps_are_written_and_read_as_sqlalchemys_sqlite_text(value: Any) -> None:
    reference = sqlite_types.DATETIME().bind_processor(pysqlite())
    back = sqlite_types.DATETIME().result_processor(pysqlite(), None)
    assert reference is not None and back is not None
    ours = SQLITE.bind(s.TS)
    assert ours is not None
    assert ours(value) == reference(value)
    ours_back = SQLITE.result(s.TS)
    assert ours_back is not None
    assert ours_back(ours(value)) == back(reference(value))
