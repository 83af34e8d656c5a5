"""Statements as SQL text for one dialect, and the store's own conversion of values by column type.

Every statement of the store is a SQLAlchemy Core construct over the tables of ``schema`` (built
once in ``queries``, or from a caller's conditions), compiled by SQLAlchemy's dialect to SQL text
with positional parameters through its public compiler interface (``string``, ``positiontup``,
``binds``, the construct's ``exported_columns``). The text then runs on the driver itself
(``sqlite3`` or ``asyncpg``, see ``executors``); SQLAlchemy's execution layer is not used. Values
are converted here, by the SQLAlchemy type of the column or parameter, the way rows have always
been stored (timestamps as SQLite text, JSON as text, SQLite booleans as integers), so that a
database written by an earlier parley reads back the same.

Why this path and not SQLAlchemy's execution everywhere: its engine costs tens of microseconds
of Python per statement (a greenlet switch, an execution context, a result object), more than
SQLite's own work for a small statement and about twice asyncpg's; the hot paths of a mail send,
a turn and a speech used to bypass it with a second, hand-kept path that read SQLAlchemy's
private compiler state. Here there is one path for every statement, hot or not, with the
bypass's speed: measured A/B against the two-path store (``bench/compare.py``,
``bench/meeting.py``, ``bench/mail.py``, and store operations through the ``Store`` port), writes
cost the same CPU and reads less (no engine, and no thread round trip of their own for
``BEGIN``).

What a caller may pass as conditions (``where_clause``): expressions over the columns of the
table read, with values, including uncorrelated subqueries; they are compiled apart from the
statement they end, so a subquery in them could not correlate with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, and_
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

Convert = Callable[[Any], Any] | None


def _sqlite_timestamp(value: Any) -> Any:
    """A timestamp as SQLite text, as it has always been stored: the wall clock with six digits
    of microseconds and no offset (``2026-03-04 05:06:07.123456``)."""
    if isinstance(value, datetime):
        return value.isoformat(" ", "microseconds")[:26]
    if isinstance(value, date):
        return f"{value.isoformat()} 00:00:00.000000"
    if value is None:
        return None
    raise TypeError(f"a timestamp column takes a datetime, not {type(value).__name__}")


def _parse_timestamp(value: Any) -> Any:
    return None if value is None or isinstance(value, datetime) else datetime.fromisoformat(value)


def _json_text(value: Any) -> str:
    # A JSON column stores Python None as JSON null, like every other value.
    return json.dumps(value)


def _json_value(value: Any) -> Any:
    return None if value is None else json.loads(value)


def _sqlite_boolean(value: Any) -> Any:
    return None if value is None else int(value)


def _boolean(value: Any) -> Any:
    return None if value is None else bool(value)


@dataclass(frozen=True)
class Conversions:
    """How one database takes and gives the values of each column type."""

    timestamp_in: Convert
    timestamp_out: Convert
    boolean_in: Convert
    boolean_out: Convert

    def bind(self, type_: TypeEngine[Any]) -> Convert:
        if isinstance(type_, DateTime):
            return self.timestamp_in
        if isinstance(type_, JSON):
            return _json_text
        if isinstance(type_, Boolean):
            return self.boolean_in
        return None

    def result(self, type_: TypeEngine[Any]) -> Convert:
        if isinstance(type_, DateTime):
            return self.timestamp_out
        if isinstance(type_, JSON):
            return _json_value
        if isinstance(type_, Boolean):
            return self.boolean_out
        return None


SQLITE = Conversions(_sqlite_timestamp, _parse_timestamp, _sqlite_boolean, _boolean)
# asyncpg takes and gives timestamps and booleans itself, JSON as text.
POSTGRES = Conversions(None, None, None, None)


class Statement:
    """One statement as SQL text for a dialect: its parameters in order, each with its default
    and conversion, and its result columns' names and conversions."""

    __slots__ = ("binds", "keys", "outs", "sql")

    def __init__(
        self,
        sql: str,
        binds: Sequence[tuple[str, bool, Any, Convert]],
        keys: Sequence[str | None],
        outs: Sequence[Convert],
    ) -> None:
        self.sql = sql
        self.binds = tuple(binds)
        self.keys = tuple(keys)
        self.outs = tuple(outs)

    def args(self, params: Mapping[str, Any] | None) -> list[Any]:
        """The positional arguments for ``params``, each converted for the database."""
        args: list[Any] = []
        for name, required, default, convert in self.binds:
            if required:
                value = params[name]  # type: ignore[index]
            elif params is not None:
                value = params.get(name, default)
            else:
                value = default
            args.append(value if convert is None else convert(value))
        return args


# An expanded parameter (``IN`` of a list, rendered with its values) is named after its bind.
_EXPANDED = re.compile(r"^(.*)_\d+$")


def _bind_type(compiled: Any, name: str) -> TypeEngine[Any] | None:
    bind = compiled.binds.get(name)
    if bind is None:
        found = _EXPANDED.match(name)
        bind = compiled.binds.get(found.group(1)) if found else None
    return None if bind is None else bind.type


def compile_statement(
    construct: Any,
    dialect: Dialect,
    conv: Conversions,
    *,
    column_keys: Sequence[str] | None = None,
    values: bool = False,
    params: Mapping[str, Any] | None = None,
) -> Statement:
    """``construct`` compiled for ``dialect``. Parameters without a value (``bindparam``), and
    the ``column_keys`` of an ``INSERT``, are taken from each run's params; the others keep the
    value the construct gave them (with ``values``, all do, or take theirs from ``params``: a
    construct built for one run). A list of ``IN`` is rendered with as many parameters as it
    has items."""
    compiled = construct.compile(
        dialect=dialect, column_keys=list(column_keys) if column_keys is not None else None
    )
    keys = set(column_keys or ())
    required = (
        set()
        if values
        else {name for name, bind in compiled.binds.items() if bind.required or name in keys}
    )
    state = compiled.construct_expanded_state(
        dict(params or {}) if values else dict.fromkeys(required), escape_names=False
    )
    binds: list[tuple[str, bool, Any, Convert]] = []
    for name in state.positiontup or ():
        type_ = _bind_type(compiled, name)
        convert = None if type_ is None else conv.bind(type_)
        needed = name in required
        binds.append((name, needed, None if needed else state.parameters.get(name), convert))
    columns = list(getattr(construct, "exported_columns", ()))
    names = [getattr(col, "key", None) for col in columns]
    outs = [conv.result(col.type) for col in columns]
    return Statement(state.statement, binds, names, outs)


class Query:
    """A construct built once, compiled once per dialect on first use."""

    __slots__ = ("_compiled", "column_keys", "construct")

    def __init__(self, construct: Any, column_keys: Sequence[str] | None = None) -> None:
        self.construct = construct
        self.column_keys = tuple(column_keys) if column_keys is not None else None
        self._compiled: dict[str, Statement] = {}

    def statement(self, dialect: Dialect, conv: Conversions) -> Statement:
        found = self._compiled.get(dialect.name)
        if found is None:
            found = self._compiled[dialect.name] = compile_statement(
                self.construct, dialect, conv, column_keys=self.column_keys
            )
        return found


def where_clause(
    conditions: Sequence[Any], dialect: Dialect, conv: Conversions
) -> tuple[str, list[Any]]:
    """`` WHERE …`` for a caller's conditions (compiled for this run, with their values in
    order), or nothing for none. It must be the first text with parameters of its statement:
    PostgreSQL's parameters are numbered from ``$1``."""
    if not conditions:
        return "", []
    statement = compile_statement(and_(*conditions), dialect, conv, values=True)
    return " WHERE " + statement.sql, statement.args(None)


def order_clause(order_by: Sequence[Any], dialect: Dialect) -> str | None:
    """`` ORDER BY …`` for a caller's orderings, or None if one carries a parameter (then the
    whole statement is compiled for the run)."""
    if not order_by:
        return ""
    parts = []
    for column in order_by:
        compiled = column.compile(dialect=dialect)
        if compiled.positiontup:
            return None
        parts.append(compiled.string)
    return " ORDER BY " + ", ".join(parts)


@dataclass(frozen=True)
class Result:
    """The rows a statement returned (converted), their column names, and the rows it
    changed."""

    keys: tuple[str | None, ...]
    rows: list[tuple[Any, ...]]
    rowcount: int

    def all(self) -> list[tuple[Any, ...]]:
        return self.rows

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None

    def scalar_one(self) -> Any:
        if len(self.rows) != 1:
            raise LookupError(f"expected one row, got {len(self.rows)}")
        return self.rows[0][0]

    def mappings(self) -> list[dict[str, Any]]:
        keys = self.keys
        return [dict(zip(keys, row, strict=True)) for row in self.rows]  # type: ignore[arg-type]

    def mapping(self) -> dict[str, Any] | None:
        if not self.rows:
            return None
        return dict(zip(self.keys, self.rows[0], strict=True))  # type: ignore[arg-type]


def convert_rows(raw: Sequence[Sequence[Any]], outs: Sequence[Convert]) -> list[tuple[Any, ...]]:
    """Rows from the driver with each column's value converted back (``outs``)."""
    if not raw:
        return []
    if not any(outs):
        return [tuple(row) for row in raw]
    return [
        tuple(
            value if convert is None else convert(value)
            for value, convert in zip(row, outs, strict=True)
        )
        for row in raw
    ]
