"""Every record type stored and read back through the writer's direct statements
(``adapters/store/sqlite_direct.py``; on PostgreSQL ``postgres_direct.py`` and the one-statement
inserts of ``postgres_bulk.py``) and through SQLAlchemy: the same row stored, the same record
read back, whichever path wrote or read it."""

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
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from parley.adapters.bus.postgres import asyncpg_dsn
from parley.adapters.store import schema as s
from parley.adapters.store.postgres import PostgresStore, WriterTx
from parley.adapters.store.sql import _RECORDS, _to_row
from parley.adapters.store.sqlite import SqliteStore
from parley.core.ports import Tx
from parley.service.hub import Hub

NAMES = sorted(_RECORDS)
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
    """Writes and reads of one hub's store, through the direct statements or SQLAlchemy."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        store = hub.store
        self.sqlite = store if isinstance(store, SqliteStore) else None
        assert isinstance(store, (SqliteStore, PostgresStore))
        self.store = store

    async def write(self, *, direct: bool, job: Any) -> Any:
        self.store.direct_statements = direct
        try:
            return await self.hub.store.write(job)
        finally:
            self.store.direct_statements = True

    async def insert(self, name: str, record: BaseModel, *, direct: bool) -> None:
        async def job(tx: Tx) -> None:
            tx.insert(name, record)

        await self.write(direct=direct, job=job)

    async def get(self, name: str, key: str, *, direct: bool) -> Any:
        async def job(tx: Tx) -> Any:
            return await tx.get(name, key)

        return await self.write(direct=direct, job=job)

    async def delete(self, name: str, key: str, *, direct: bool) -> None:
        async def job(tx: Tx) -> None:
            await tx.delete(name, key)

        await self.write(direct=direct, job=job)

    async def update(self, name: str, key: str, values: dict[str, Any], *, direct: bool) -> int:
        async def job(tx: Tx) -> int:
            return await tx.update(name, key, **values)

        return int(await self.write(direct=direct, job=job))

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
async def test_a_record_is_stored_and_read_back_the_same_through_both_paths(
    hub: Hub, name: str
) -> None:
    paths = Paths(hub)
    for salt, (variant, (ts, nulls)) in enumerate(VARIANTS.items()):
        key = f"{variant}-key"
        original = _record(name, key, ts=ts, nulls=nulls, salt=salt)
        stored: list[Any] = []
        reads: list[Any] = []
        # The same record inserted through each path in turn, each read through both.
        for direct in (True, False):
            await paths.insert(name, original, direct=direct)
            stored.append(await paths.stored(name, key))
            reads += [
                await paths.get(name, key, direct=True),
                await paths.get(name, key, direct=False),
            ]
            async with hub.store.read() as tx:
                reads.append(await tx.get(name, key))
            await paths.delete(name, key, direct=direct)
        assert stored[0] == stored[1], variant
        for read in reads:
            assert read is not None and type(read) is type(original)
            assert read.id == key
            _same(read, reads[0])
        if variant != "offset":
            # SQLite keeps a timestamp's wall clock: an offset one reads back as that time in UTC.
            _same(reads[0], original)

        # Every column updated at once, to another variant's values, through each path.
        await paths.insert(name, original, direct=True)
        other_variant = "nulls" if variant != "nulls" else "offset"
        other_ts, other_nulls = VARIANTS[other_variant]
        other = _record(name, "unused", ts=other_ts, nulls=other_nulls, salt=9)
        values, first = _to_row(name, other), _to_row(name, original)
        # ``name`` and ``key`` are the parameters of ``Tx.update`` itself.
        for column in ("id", "name", "key"):
            values.pop(column, None)
            first.pop(column, None)
        updated = []
        for direct in (True, False):
            assert await paths.update(name, key, values, direct=direct) == 1
            updated.append(await paths.stored(name, key))
            reads = [
                await paths.get(name, key, direct=True),
                await paths.get(name, key, direct=False),
            ]
            _same(reads[0], reads[1])
            if other_variant != "offset":
                fields = {f for f in values if f in type(other).model_fields}
                assert reads[0].model_dump(include=fields) == other.model_dump(include=fields)
            assert await paths.update(name, key, first, direct=direct) == 1
            assert await paths.stored(name, key) == stored[0]
        assert updated[0] == updated[1], variant
        assert updated[0] != stored[0], variant
        assert await paths.update(name, "missing", values, direct=True) == 0


async def test_the_direct_path_raises_what_sqlalchemy_raises(hub: Hub) -> None:
    paths = Paths(hub)
    record = _record("events", "dup", ts=UTC_TS, nulls=False)
    await paths.insert("events", record, direct=True)
    for direct in (True, False):
        with pytest.raises(Exception) as raised:
            await paths.insert("events", record, direct=direct)
        assert isinstance(raised.value.__cause__, IntegrityError), direct


async def test_the_writer_runs_built_statements_directly(hub: Hub) -> None:
    """The bench's figures rest on the direct path being taken."""
    paths = Paths(hub)
    record = _record("events", "seen", ts=UTC_TS, nulls=False)

    async def job(tx: Tx) -> Any:
        if paths.sqlite is not None:
            assert getattr(tx, "direct", None) is not None
        else:
            assert isinstance(tx, WriterTx)
        tx.insert("events", record)
        return await tx.get("events", "seen")

    assert (await paths.write(direct=True, job=job)) == record


@pytest.mark.parametrize("mixed", [True, False], ids=["both-paths", "direct-only"])
async def test_a_transaction_holds_the_writes_of_both_paths(hub: Hub, mixed: bool) -> None:
    """A batch's direct statements and SQLAlchemy's share one transaction: both commit, or a
    failure rolls both back, and the writer goes on working after either."""
    paths = Paths(hub)
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

    class Refused(Exception):
        pass

    async def job(tx: Tx, key: str, *, fail: bool) -> None:
        tx.insert("events", _record("events", key, ts=UTC_TS, nulls=False))
        if mixed:
            await tx.insert_token(f"hash-{key}", "someone", "label", at)  # built per call
        assert await tx.get("events", key) is not None  # flushes the insert first
        if fail:
            raise Refused(key)

    with pytest.raises(Refused):
        await paths.write(direct=True, job=lambda tx: job(tx, "failed", fail=True))
    await paths.write(direct=True, job=lambda tx: job(tx, "kept", fail=False))
    assert await paths.get("events", "failed", direct=True) is None
    assert await paths.get("events", "kept", direct=False) is not None
    async with hub.store.read() as tx:
        tokens = s.tokens.c
        found = (await tx.conn.execute(select(tokens.hash).order_by(tokens.hash))).scalars()
        assert [h for h in found if h.startswith("hash-")] == (["hash-kept"] if mixed else [])


@given(
    value=st.one_of(
        st.none(),
        st.dates(),
        st.datetimes(),
        st.datetimes(timezones=st.timezones()),
    )
)
def test_timestamps_are_written_as_sqlalchemys_sqlite_text(value: Any) -> None:
    from sqlalchemy.dialects.sqlite import base as sqlite_types
    from sqlalchemy.dialects.sqlite.aiosqlite import dialect

    from parley.adapters.store.sqlite_direct import _datetime_text

    reference = sqlite_types.DATETIME().bind_processor(dialect())
    assert reference is not None
    assert _datetime_text(value) == reference(value)
