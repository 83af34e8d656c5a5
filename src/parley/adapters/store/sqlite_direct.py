"""The SQLite writer's statements built once, run on its ``sqlite3`` connection directly.

Through SQLAlchemy's async layer a statement costs 40–60 µs of Python on the writer (a greenlet
per call, the execution context, the result's metadata), against a few µs of SQLite's own work.
The writer already runs inline on the event loop (see ``sqlite_inline``), so the statements built
once at import (``prepared.py`` and the generic insert, get and update of ``sql.py``) are
compiled here once by SQLAlchemy's SQLite dialect to SQL text and bind order, and run on the
cursor with the bind and result processors SQLAlchemy itself would apply (timestamps, JSON,
booleans): rows are stored and read back exactly as through SQLAlchemy. They run inside the
transaction SQLAlchemy began on the same connection; everything else still goes through it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy.dialects.sqlite import base as sqlite_types
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, NoResultFound

Processor = Callable[[Any], Any] | None


class DirectStatement:
    """One statement compiled to SQL text, its binds in order and its result columns."""

    __slots__ = ("binds", "keys", "result_processors", "source", "sql")

    def __init__(self, source: Any, dialect: Dialect, column_keys: Sequence[str] | None) -> None:
        # Keeps the statement alive so that its id, the cache key, is never reused.
        self.source = source
        compiled = source.compile(dialect=dialect, column_keys=column_keys)
        required = {name: None for name, bind in compiled.binds.items() if bind.required}
        # Expanding binds (``IN`` of a constant tuple) are rendered once with their values.
        state = compiled.construct_expanded_state(required)
        processors = {**compiled._bind_processors, **state.processors}
        for name, bind in compiled.binds.items():
            if name in processors and _default_datetime(bind.type.dialect_impl(dialect)):
                processors[name] = _datetime_text
        self.sql: str = state.statement
        self.binds: tuple[tuple[str, bool, Any, Processor], ...] = tuple(
            (name, name in required, state.parameters.get(name), processors.get(name))
            for name in state.positiontup or ()
        )
        columns = compiled._result_columns
        self.keys: tuple[str, ...] = tuple(col[0] for col in columns)
        self.result_processors: tuple[Processor, ...] = tuple(
            col[3].dialect_impl(dialect).result_processor(dialect, None) for col in columns
        )

    def arguments(self, params: Mapping[str, Any] | None) -> list[Any]:
        """The positional arguments for ``params``, each through its bind processor."""
        args: list[Any] = []
        for name, required, default, process in self.binds:
            if required:
                value = params[name]  # type: ignore[index]
            elif params is not None:
                value = params.get(name, default)
            else:
                value = default
            args.append(value if process is None else process(value))
        return args

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            value if process is None else process(value)
            for value, process in zip(raw, self.result_processors, strict=True)
        )


# SQLite has no timestamp type: SQLAlchemy stores a DateTime as this text (time zone dropped).
_DATETIME_FORMAT = (
    "%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d.%(microsecond)06d"
)


def _default_datetime(impl: Any) -> bool:
    return isinstance(impl, sqlite_types.DATETIME) and (
        getattr(impl, "_storage_format", None) == _DATETIME_FORMAT
    )


def _datetime_text(value: Any) -> Any:
    """SQLAlchemy's SQLite DATETIME bind processor's text, built in C: every row has a
    timestamp or two, and the ``%`` formatting of seven fields was a tenth of a mail send's
    statement arguments. ``isoformat`` pads the year to four digits and, with
    ``timespec="microseconds"``, always writes six; the offset it adds is cut."""
    if isinstance(value, datetime):
        return value.isoformat(" ", "microseconds")[:26]
    if isinstance(value, date):
        return f"{value.isoformat()} 00:00:00.000000"
    if value is None:
        return None
    raise TypeError("SQLite DateTime type only accepts Python datetime and date objects as input.")


class DirectResult:
    """The subset of SQLAlchemy's result interface the store uses, over fetched rows."""

    __slots__ = ("_keys", "_rows", "rowcount")

    def __init__(self, keys: tuple[str, ...], rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self._keys = keys
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[tuple[Any, ...]]:
        return self._rows

    def first(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        if len(self._rows) != 1:
            raise NoResultFound(f"expected one row, got {len(self._rows)}")
        return self._rows[0][0]

    def mappings(self) -> DirectMappings:
        return DirectMappings(self._keys, self._rows)


class DirectMappings:
    """Rows as dictionaries of column name to value, like ``Result.mappings()``."""

    __slots__ = ("_keys", "_rows")

    def __init__(self, keys: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        self._keys = keys
        self._rows = rows

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (dict(zip(self._keys, row, strict=True)) for row in self._rows)

    def all(self) -> list[dict[str, Any]]:
        return list(self)

    def first(self) -> dict[str, Any] | None:
        return dict(zip(self._keys, self._rows[0], strict=True)) if self._rows else None


class DirectSqlite:
    """Runs statements built once on the writer's ``sqlite3`` connection."""

    def __init__(self, conn: sqlite3.Connection, dialect: Dialect) -> None:
        self.conn = conn
        self.dialect = dialect
        self._compiled: dict[tuple[int, tuple[str, ...] | None], DirectStatement] = {}

    def _statement(self, stmt: Any, column_keys: tuple[str, ...] | None = None) -> DirectStatement:
        key = (id(stmt), column_keys)
        direct = self._compiled.get(key)
        if direct is None:
            direct = self._compiled[key] = DirectStatement(stmt, self.dialect, column_keys)
        return direct

    def execute(self, stmt: Any, params: Mapping[str, Any] | None = None) -> DirectResult:
        direct = self._statement(stmt)
        args = direct.arguments(params)
        try:
            cursor = self.conn.execute(direct.sql, args)
            rows = cursor.fetchall() if direct.keys else []
        except sqlite3.Error as exc:
            raise self._error(direct.sql, args, exc) from exc
        processed = [direct.row(raw) for raw in rows] if rows else rows
        return DirectResult(direct.keys, processed, cursor.rowcount)

    def insert_many(self, stmt: Any, rows: list[dict[str, Any]]) -> None:
        """Run an ``INSERT`` once per row, with the columns of the first row, like
        ``Connection.execute(insert, rows)``."""
        direct = self._statement(stmt, tuple(rows[0]))
        args = [direct.arguments(row) for row in rows]
        try:
            self.conn.executemany(direct.sql, args)
        except sqlite3.Error as exc:
            raise self._error(direct.sql, args, exc) from exc

    def _error(self, sql: str, args: Any, exc: sqlite3.Error) -> BaseException:
        # The same exception class SQLAlchemy raises (IntegrityError, OperationalError, ...).
        return DBAPIError.instance(sql, args, exc, sqlite3.Error, dialect=self.dialect)
