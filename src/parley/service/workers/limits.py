"""How far one principal may grow a worker tree: how deep a child may sit, how many unfinished
children a worker may have, and what starting or spawning a worker costs against the caller's
send quota. Functions over a worker's records (:class:`~.records.WorkerRecords`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from parley.core import workers as wk
from parley.core.identity import Principal
from parley.core.ports import Tx
from parley.core.workers import Worker
from parley.service.quotas import Ticket
from parley.service.workers.records import WorkerRecords


async def charged(
    workers: WorkerRecords, caller: Principal, job: Callable[[Tx, Ticket], Awaitable[Worker]]
) -> Worker:
    """Run a write job that stores the caller's text, against the caller's send quota as mail
    and posts are: the job charges its ticket once it knows what it stores, and the charge is
    given back if the job does not commit."""
    ticket = workers.ctx.quotas.ticket(caller)
    try:
        return await workers.ctx.store.write(lambda tx: job(tx, ticket))
    except Exception:
        # Nothing was stored. A cancelled request keeps its charge: its job may still commit.
        ticket.refund()
        raise


async def check_room(workers: WorkerRecords, tx: Tx, parent: Worker) -> None:
    """Refuse a child of ``parent`` that would sit deeper below its root than the depth limit,
    or one unfinished child more than the fan-out limit.

    Only unfinished children count: a long-lived worker (an agent's main worker) hands out tasks
    for its whole life, and what the limit bounds is a tree's live breadth, the turns it runs at
    once; the send quota bounds how many are made. The caller holds the parent's lock, so two
    spawns cannot both take the last place."""
    settings = workers.ctx.settings
    deepest = settings.worker_max_depth
    depth = 1
    async for _ in workers.up(tx, parent):
        depth += 1
        if depth > deepest:
            break  # deep enough to refuse: the rest of the chain does not matter
    if depth > deepest:
        raise wk.WorkerTooDeep(
            f"a child of worker {parent.id!r} would sit more than {deepest} levels below its "
            "root worker, deeper than the hub allows (worker_max_depth); do this task in "
            f"{parent.id!r} itself, or spawn it from a worker higher up",
            worker_id=parent.id,
            limit=deepest,
        )
    most = settings.worker_max_children
    w = tx.table("workers").c
    unfinished: list[Worker] = await tx.select(
        "workers",
        w.parent_worker_id == parent.id,
        w.state.not_in(list(wk.TERMINAL)),
        limit=most,
    )
    if len(unfinished) >= most:
        raise wk.TooManyChildren(
            f"worker {parent.id!r} has {most} unfinished children, as many as the hub allows "
            "(worker_max_children); wait for one of them to end, or cancel one",
            worker_id=parent.id,
            limit=most,
        )
