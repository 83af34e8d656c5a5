"""A PostgreSQL write transaction's buffered inserts and notifications in one statement.

A batch of mail sends buffers rows for two tables (``messages``, ``events``) and queues a
``NOTIFY`` for each message; as one ``executemany`` per table plus one notify statement that was
three round trips before the commit, and a round trip costs far more than PostgreSQL's own work
for a few rows. Here each table's rows go in as one array per column, unnested by a
data-modifying ``WITH`` clause, and the notifications ride in the same statement's query::

    WITH i0 AS (INSERT INTO messages (id, ...) SELECT * FROM unnest($1::VARCHAR(32)[], ...)),
         i1 AS (INSERT INTO events (id, ...) SELECT * FROM unnest($9::VARCHAR(32)[], ...))
    SELECT count(pg_notify(c, p)) FROM unnest($15::text[], $16::text[]) AS n(c, p)

PostgreSQL runs every data-modifying ``WITH`` clause once and to completion whether or not the
query reads it, and checks constraints at the end of the statement, as ``executemany`` did per
row. Values go through the store's conversion of each column's type (JSON as text,
``statements.POSTGRES``), as every other statement's do. A function scan yields an array's
elements in order: the rows and the notifications go in as queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Dialect

from parley.adapters.store.statements import Conversions, Convert

# Notifications of one transaction on one channel travel joined by this character, as many as
# fit in one payload: a listener then handles one message per commit instead of one per
# publish, and PostgreSQL queues and signals one. JSON escapes control characters, so it never
# occurs inside a payload the bus makes.
NOTIFY_SEPARATOR = "\x1e"
# PostgreSQL refuses a payload of 8,000 bytes or more.
NOTIFY_MAX_BYTES = 7_900
# (table name, the columns of its rows) for each group of rows, in order.
Shape = tuple[tuple[str, tuple[str, ...]], ...]


def pack_notifications(notifications: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Join consecutive notifications on one channel with ``NOTIFY_SEPARATOR`` while the joined
    payload stays under ``NOTIFY_MAX_BYTES``; the order is kept."""
    packed: list[tuple[str, str]] = []
    size = 0
    for channel, payload in notifications:
        length = len(payload.encode())
        if packed and packed[-1][0] == channel and size + 1 + length < NOTIFY_MAX_BYTES:
            packed[-1] = (channel, packed[-1][1] + NOTIFY_SEPARATOR + payload)
            size += 1 + length
        else:
            packed.append((channel, payload))
            size = length
    return packed


class BulkStatement:
    """The statement text for one shape of buffered rows, and each column's conversion."""

    __slots__ = ("columns", "processors", "sql")

    def __init__(
        self,
        tables: dict[str, Table],
        shape: Shape,
        notify: bool,
        dialect: Dialect,
        conv: Conversions,
    ) -> None:
        quote = dialect.identifier_preparer.quote
        self.columns = [columns for _, columns in shape]
        clauses: list[str] = []
        self.processors: list[list[Convert]] = []
        n = 0
        for i, (name, columns) in enumerate(shape):
            table = tables[name]
            arrays: list[str] = []
            processors: list[Convert] = []
            for column in columns:
                n += 1
                type_ = table.c[column].type
                arrays.append(f"${n}::{type_.compile(dialect=dialect)}[]")
                processors.append(conv.bind(type_))
            self.processors.append(processors)
            clauses.append(
                f"i{i} AS (INSERT INTO {quote(table.name)} ({', '.join(map(quote, columns))}) "
                f"SELECT * FROM unnest({', '.join(arrays)}))"
            )
        query = (
            f"SELECT count(pg_notify(c, p)) FROM unnest(${n + 1}::text[], ${n + 2}::text[])"
            " AS n(c, p)"
            if notify
            else "SELECT 0"
        )
        self.sql = f"WITH {', '.join(clauses)} {query}" if clauses else query

    def arguments(
        self, rows: Sequence[Sequence[dict[str, Any]]], notifications: Sequence[tuple[str, str]]
    ) -> list[Any]:
        """One array per column of each group of ``rows``, then the channels and payloads."""
        args: list[Any] = []
        for group, columns, processors in zip(rows, self.columns, self.processors, strict=True):
            for column, process in zip(columns, processors, strict=True):
                values = [row[column] for row in group]
                args.append(values if process is None else [process(v) for v in values])
        if notifications:
            args.append([channel for channel, _ in notifications])
            args.append([payload for _, payload in notifications])
        return args


class BulkStatements:
    """Statements by shape, built on first use (a hub sees only a handful of shapes)."""

    def __init__(self, tables: dict[str, Table], dialect: Dialect, conv: Conversions) -> None:
        self.tables = tables
        self.dialect = dialect
        self.conv = conv
        self._built: dict[tuple[Shape, bool], BulkStatement] = {}

    def build(
        self, pending: dict[str, list[dict[str, Any]]], notifications: Sequence[tuple[str, str]]
    ) -> tuple[str, list[Any]]:
        """The SQL text and positional arguments inserting ``pending`` and sending
        ``notifications``. A table's rows are grouped by their columns (a record's rows all
        have the same), as ``executemany`` takes one column list."""
        groups: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
        for name, rows in pending.items():
            for row in rows:
                groups.setdefault((name, tuple(row)), []).append(row)
        shape: Shape = tuple(groups)
        key = (shape, bool(notifications))
        statement = self._built.get(key)
        if statement is None:
            statement = self._built[key] = BulkStatement(
                self.tables, shape, bool(notifications), self.dialect, self.conv
            )
        packed = pack_notifications(notifications)
        return statement.sql, statement.arguments(list(groups.values()), packed)
