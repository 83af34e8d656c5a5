"""The scale-out store: PostgreSQL through asyncpg. Several hubs may share one database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from parley.adapters.store import migrate
from parley.adapters.store.sql import SqlStore
from parley.core.errors import StorageError

# Any constant works; it only has to be the same for every hub migrating this database.
_MIGRATION_LOCK = 0x70617231


def async_url(url: str) -> str:
    """Normalise a PostgreSQL URL to the asyncpg driver."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    return url


class PostgresStore(SqlStore):
    """PostgreSQL store; rows are locked with SELECT … FOR UPDATE where order matters."""

    dialect = "postgresql"
    writer_count = 4

    async def open(self) -> None:
        try:
            self.engine = create_async_engine(async_url(self.url), pool_size=10, max_overflow=10)
            async with self.engine.connect() as conn:
                # Several hubs may start at once; one migrates, the others wait and find head.
                await conn.execute(text(f"SELECT pg_advisory_lock({_MIGRATION_LOCK})"))
                try:
                    await conn.run_sync(migrate.upgrade)
                    await conn.commit()
                finally:
                    await conn.execute(text(f"SELECT pg_advisory_unlock({_MIGRATION_LOCK})"))
                    await conn.commit()
        except StorageError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise StorageError(f"could not open the PostgreSQL store: {exc}") from exc

    def lock_row(self, stmt: Any) -> Any:
        return stmt.with_for_update()
