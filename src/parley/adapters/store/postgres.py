"""The scale-out store: PostgreSQL through asyncpg. Several hubs may share one database."""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from parley.adapters.store import migrate
from parley.adapters.store.sql import SqlStore, SqlTx
from parley.core.errors import StorageError

# Any constant works; it only has to be the same for every hub migrating this database.
_MIGRATION_LOCK = 0x70617231
# How long a batch of jobs waits for a row lock before it is run again job by job.
_BATCH_LOCK_TIMEOUT = text("SET LOCAL lock_timeout = '50ms'")
# The namespace (first key) of the advisory locks that say a hub is alive.
_LIVENESS_LOCKS = 0x70617232


def _liveness_key(owner: str) -> int:
    """A hub id as the second key of its liveness lock (a signed 32-bit integer)."""
    return int.from_bytes(hashlib.blake2b(owner.encode(), digest_size=4).digest(), signed=True)


def async_url(url: str) -> str:
    """Normalise a PostgreSQL URL to the asyncpg driver."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    return url


class PostgresStore(SqlStore):
    """PostgreSQL store; rows are locked with SELECT … FOR UPDATE where order matters."""

    dialect = "postgresql"
    # One writer per hub: several writers of one process locked recipients' rows in different
    # orders and deadlocked under load (PostgreSQL breaks a deadlock only after 1 s); one
    # writer with group commit was faster as well. Hubs sharing the database still conflict
    # now and then, and such a job is retried (``SqlStore._run_alone``).
    writer_count = 1
    _liveness: AsyncConnection | None = None

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

    async def begin_batch(self, tx: SqlTx) -> None:
        """A batch of several jobs locks their rows in the order the jobs came, and another
        hub's batch may lock the same rows in another order: a deadlock PostgreSQL breaks only
        after ``deadlock_timeout`` (1 s), three of them a second with three hubs under mail
        load. A batch instead gives up on a row lock it cannot get soon; its jobs are then run
        one by one (``SqlStore._run_batch``), and a lone job waits as long as it must."""
        await tx.conn.execute(_BATCH_LOCK_TIMEOUT)

    def lock_row(self, stmt: Any) -> Any:
        return stmt.with_for_update()

    async def mark_alive(self, owner: str) -> None:
        """Hold a session advisory lock named after the hub on a connection of its own: the
        server releases it when that connection ends, so a hub killed with SIGKILL is seen dead
        at once, and no clock or lease has to be trusted."""
        assert self.engine is not None
        await super().mark_alive(owner)
        conn = await self.engine.connect()
        await conn.execute(
            text("SELECT pg_advisory_lock(:ns, :key)"),
            {"ns": _LIVENESS_LOCKS, "key": _liveness_key(owner)},
        )
        await conn.commit()  # a session lock outlives the transaction; idle, not idle in tx
        self._liveness = conn

    async def is_alive(self, owner: str) -> bool:
        if owner == self._owner:
            return True
        assert self.engine is not None
        params = {"ns": _LIVENESS_LOCKS, "key": _liveness_key(owner)}
        async with self.engine.connect() as conn:
            free = await conn.execute(text("SELECT pg_try_advisory_lock(:ns, :key)"), params)
            if not free.scalar():
                return True
            await conn.execute(text("SELECT pg_advisory_unlock(:ns, :key)"), params)
            await conn.commit()
        return False

    async def close(self) -> None:
        if self._liveness is not None:
            with contextlib.suppress(Exception):
                await self._liveness.close()
            self._liveness = None
        await super().close()
