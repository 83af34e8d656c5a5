"""The PostgreSQL writer's statements built once, run on its asyncpg connection directly.

As on SQLite (``direct``, ``sqlite_direct``), the statements built once are compiled once by
SQLAlchemy's own dialect (the asyncpg dialect, with its ``$n`` parameters and casts), prepared
once on the connection, and run with the bind and result processors SQLAlchemy would apply,
inside the transaction the writer began on that connection: through SQLAlchemy's async layer
each cost about twice asyncpg's own work for the small statements of a mail send or a turn. A
failure is raised as the SQLAlchemy exception the same statement would raise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from parley.adapters.store.direct import DirectResult, DirectStatement

_ROWCOUNT = re.compile(r"(?:SELECT|UPDATE|DELETE|INSERT \d+) (\d+)")


class DirectPostgres:
    """Runs statements built once on the writer's asyncpg connection."""

    def __init__(self, conn: AsyncConnection, driver: Any) -> None:
        self.conn = conn
        self.driver = driver
        self.dialect: Dialect = conn.dialect
        self._compiled: dict[int, tuple[DirectStatement, Any]] = {}

    async def execute(self, stmt: Any, params: Mapping[str, Any] | None = None) -> DirectResult:
        found = self._compiled.get(id(stmt))
        if found is None:
            found = await self._prepare(stmt)
        direct, prepared = found
        args = direct.arguments(params)
        try:
            raw = await prepared.fetch(*args)
        except Exception as exc:
            raise await driver_error(self.conn, self.driver, direct.sql, args, exc) from exc
        rows = [direct.row(r) for r in raw] if raw else []
        count = _ROWCOUNT.match(prepared.get_statusmsg() or "")
        return DirectResult(direct.keys, rows, int(count.group(1)) if count else -1)

    async def _prepare(self, stmt: Any) -> tuple[DirectStatement, Any]:
        """Compile ``stmt`` and prepare it on the connection; the prepared statement's result
        columns give the type codes its result processors need (as a cursor's description
        does for SQLAlchemy)."""
        direct = DirectStatement(stmt, self.dialect, None, resolve=False)
        try:
            prepared = await self.driver.prepare(direct.sql)
        except Exception as exc:
            raise await driver_error(self.conn, self.driver, direct.sql, (), exc) from exc
        direct.resolve(self.dialect, [a.type.oid for a in prepared.get_attributes()])
        found = self._compiled[id(stmt)] = (direct, prepared)
        return found

    async def run(self, sql: str, *args: Any) -> None:
        """Run ``sql`` (as a simple query, with several statements, without ``args``)."""
        try:
            await self.driver.execute(sql, *args)
        except Exception as exc:
            raise await driver_error(self.conn, self.driver, sql, args, exc) from exc


async def driver_error(
    conn: AsyncConnection, driver: Any, sql: str, args: Any, exc: Exception
) -> Exception:
    """An asyncpg error as the SQLAlchemy exception a statement run through ``conn`` raises
    (the writer retries deadlocks and serialization failures by their SQLSTATE); a connection
    the error closed is invalidated, so that the writer replaces it."""
    if driver.is_closed():
        await conn.invalidate()
    dbapi: Any = conn.dialect.dbapi
    try:
        AsyncAdapt_asyncpg_connection._handle_exception_no_connection(dbapi, exc)
    except dbapi.Error as translated:
        wrapped: Exception = DBAPIError.instance(
            sql, args, translated, dbapi.Error, dialect=conn.dialect
        )
        return wrapped
    except Exception as other:
        return other
    return exc
