"""The SQLite writer's statements built once, run on its ``sqlite3`` connection directly.

The writer runs inline on the event loop (see ``sqlite_inline``); its statements built once are
compiled by SQLAlchemy's SQLite dialect (``direct``) and run on the cursor, inside the
transaction begun on the same connection; everything else still goes through SQLAlchemy.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from sqlalchemy.dialects.sqlite import base as sqlite_types
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from parley.adapters.store.direct import DirectResult, DirectStatement, Processor

# SQLite has no timestamp type: SQLAlchemy stores a DateTime as this text (time zone dropped).
_DATETIME_FORMAT = (
    "%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d.%(microsecond)06d"
)


def _faster_bind(impl: Any) -> Processor:
    """A faster equivalent of SQLAlchemy's bind processor for a type, if there is one."""
    if isinstance(impl, sqlite_types.DATETIME) and (
        getattr(impl, "_storage_format", None) == _DATETIME_FORMAT
    ):
        return _datetime_text
    return None


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
            direct = self._compiled[key] = DirectStatement(
                stmt, self.dialect, column_keys, bind_processor=_faster_bind
            )
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
