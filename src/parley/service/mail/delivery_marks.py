"""Marking mail delivered, many readers' marks in one write.

Every live inbox stream marks each message delivered as it sends it, and so does every inbox
read: under mail load that is a write per message, and on PostgreSQL each is a statement and a
round trip on the hub's single writer. Marks that arrive while the writer is busy wait in one
group; the group's job, when the writer reaches it, marks all of their ids with one statement
and records one ``mail.delivered`` event per inbox for the ids it actually changed (mail that
another reader marked first is not counted twice). Every caller of the group gets the group's
delivery time once it has committed, or its error.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from parley.core.ports import Tx
from parley.service.context import ServiceContext


class _Group:
    """The marks waiting for one write: ids by inbox, in the order they were asked for."""

    def __init__(self) -> None:
        self.by_owner: dict[str, dict[str, None]] = {}
        self.done: asyncio.Future[datetime] = asyncio.get_running_loop().create_future()
        # Read the outcome even if every caller went away before it came.
        self.done.add_done_callback(lambda f: f.cancelled() or f.exception())
        # Fixed at the job's first run, so that a retried job marks with the same time.
        self.at: datetime | None = None
        # The loop keeps only a weak reference to a task: the group keeps its writer alive.
        self.task: asyncio.Task[None] | None = None


class DeliveryMarks:
    """Marks mail delivered in groups (see the module's docstring)."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self._open: _Group | None = None

    async def mark(self, owner: str, ids: list[str]) -> datetime:
        """Mark ``ids`` of ``owner``'s inbox delivered (those still pending); returns the
        delivery time once it is committed."""
        group = self._open
        if group is None:
            group = self._open = _Group()
            group.task = asyncio.create_task(self._write(group), name="parley-delivery-marks")
        group.by_owner.setdefault(owner, {}).update(dict.fromkeys(ids))
        # A caller that goes away leaves the group to the others: its marks are written anyway.
        return await asyncio.shield(group.done)

    async def _write(self, group: _Group) -> None:
        async def job(tx: Tx) -> None:
            if self._open is group:
                self._open = None  # marks from now on go to the next group
            if group.at is None:
                group.at = self.ctx.clock.now()
            wanted = [i for ids in group.by_owner.values() for i in ids]
            marked = set(await tx.mark_delivered(wanted, group.at))
            for owner, ids in group.by_owner.items():
                changed = [i for i in ids if i in marked]
                if changed:
                    self.ctx.events.record(
                        tx,
                        "mail.delivered",
                        actor=owner,
                        subject=f"inbox:{owner}",
                        payload={"ids": changed},
                    )

        try:
            await self.ctx.store.write(job)
        except BaseException as exc:
            if self._open is group:
                self._open = None
            group.done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        assert group.at is not None
        group.done.set_result(group.at)
