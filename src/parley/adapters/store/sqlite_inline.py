"""A SQLite connection that runs its statements on the event loop thread, for the writer.

aiosqlite sends every statement to a worker thread and wakes the loop with the result: each
``execute``, ``fetchall``, ``BEGIN`` and ``COMMIT`` costs one thread round trip (100–250 µs on a
busy two-core machine), which made a discussion turn's ten-odd statements cost milliseconds. The
statements themselves take microseconds in WAL mode with ``synchronous=NORMAL``, so the single
writer connection runs them inline instead, behind the small subset of aiosqlite's interface that
SQLAlchemy's aiosqlite dialect uses (handed to it with ``async_creator``).

This is safe only for the writer: it never waits on a lock held by this process (readers in WAL
mode take no write lock, and the data root lock keeps other processes out), so blocking the loop
while it works never blocks the work it waits for. Readers stay on aiosqlite's threads, where a
large read does not stall the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any


class InlineCursor:
    """An aiosqlite-shaped cursor whose coroutines complete without suspending."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = None) -> InlineCursor:
        if parameters is None:
            self._cursor.execute(sql)
        else:
            self._cursor.execute(sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        self._cursor.executemany(sql, parameters)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> Sequence[Any]:
        if size is None:
            return self._cursor.fetchmany()
        return self._cursor.fetchmany(size)

    async def fetchall(self) -> Sequence[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()


class _RunNow:
    """Stands in for aiosqlite's request queue, which SQLAlchemy uses directly to set the
    isolation level: the request is run at once and its future resolved."""

    def put_nowait(self, item: tuple[asyncio.Future[Any] | None, Callable[[], Any]]) -> None:
        future, function = item
        try:
            result = function()
        except Exception as exc:
            if future is not None:
                future.set_exception(exc)
            return
        if future is not None:
            future.set_result(result)


class InlineConnection:
    """An aiosqlite-shaped connection over a plain :mod:`sqlite3` connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        # SQLAlchemy checks ``_connection`` to tell an open connection from a closed one.
        self._connection: sqlite3.Connection | None = conn
        self._tx = _RunNow()

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self._conn.isolation_level = value  # type: ignore[assignment]

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._conn.cursor())

    async def commit(self) -> None:
        self._conn.commit()

    async def rollback(self) -> None:
        self._conn.rollback()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._connection is not None:
            self._connection = None
            self._conn.close()


def inline_creator(path: Path) -> Callable[[], Any]:
    """The ``async_creator`` of an engine whose connections run inline."""

    async def connect() -> InlineConnection:
        # isolation_level=None: the engine's begin listener issues BEGIN IMMEDIATE itself.
        # check_same_thread=False: the pool may close a connection from another thread.
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        return InlineConnection(conn)

    return connect
