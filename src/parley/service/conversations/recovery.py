"""What a hub does with the tasks another hub left running (Q4, P2): at start, and on every
lease sweep when several hubs share a PostgreSQL database.

A task is taken over when the hub that drives it is gone (its liveness lock is free: it died or
was killed) or its lease ran out (it stopped renewing: paused, or cut off from the store). Taking
over ends the task and flags it cancelled in the same transaction, so a reply its old driver still
tries to commit is refused at the commit point (C10), and the old driver's own end is not written.

A task that had already been told to stop (superseded, cancelled, its channel closed or deleted)
ends the way it was told to, not as ``interrupted``: the crash only kept it from writing its
own end. A task that was really cut off ends ``interrupted``, and its channel gets one note,
however many of its tasks the crash cut off (worded for a worker in a worker's channel).
Nothing committed is touched.

The task's old driver, if it is only paused, never writes the task's end (it finds the task
ended), so whatever hangs on that end happens in the takeover's transaction instead
(``TaskHooks.on_taken_over``): a worker whose turn it was is ``interrupted`` there, with the
reason, and can be resumed at once.
"""

from __future__ import annotations

from parley.core import discussion as d
from parley.core import workers as wk
from parley.core.channels import Channel, EndReason, Task
from parley.core.ports import Tx
from parley.service.context import ServiceContext
from parley.service.conversations.task_hooks import TaskHooks
from parley.service.conversations.transcripts import Transcripts

STOPPED = "the hub stopped while the task ran"
LOST_LEASE = "the hub driving it stopped renewing its lease (paused or cut off from the store)"


async def recover(
    ctx: ServiceContext, transcripts: Transcripts, hooks: TaskHooks, me: str
) -> list[Task]:
    """End the tasks of hubs that are gone or whose lease ran out, as the hub ``me``; return
    them. Remote agents' turns they offered are withdrawn (an answer to one would be lost)."""
    now = ctx.clock.now()
    # Each owner is asked once (PostgreSQL asks the server): a dead hub leaves many tasks.
    alive: dict[str, bool] = {}

    async def orphaned(task: Task) -> bool:
        if task.status != "running" or task.owner == me:
            return False  # ended meanwhile, or this hub drives it
        if task.lease_until is not None and task.lease_until < now:
            return True  # its hub stopped renewing (paused, cut off from the store)
        if task.owner is None:
            return True
        if task.owner not in alive:
            alive[task.owner] = await ctx.store.is_alive(task.owner)
        return not alive[task.owner]

    # Look without locks first: a sweep runs every few seconds on every hub, and most of the
    # time every running task has a live hub holding its lease.
    async with ctx.store.read() as rtx:
        t = rtx.table("tasks").c
        running: list[Task] = await rtx.select("tasks", t.status == "running", order_by=[t.id])
    candidates = [task for task in running if await orphaned(task)]
    if not candidates:
        return []

    async def job(tx: Tx) -> list[Task]:
        ended: list[Task] = []
        noted: set[str] = set()
        for task in candidates:
            # Channel row before task row: the lock order of every other task write.
            channel: Channel | None = await tx.get("channels", task.channel_id, for_update=True)
            row: Task = await tx.get("tasks", task.id, for_update=True)
            if row.owner != task.owner or not await orphaned(row):
                continue  # ended, or renewed, since the look
            lease_ran_out = row.lease_until is not None and row.lease_until < now
            status = channel.status if channel is not None else None
            latest = channel.last_trigger_id if channel is not None else None
            end: EndReason = "interrupted"
            if row.cancel_requested:
                # Told to stop before the hub died: that, not the crash, is how it ended.
                end = d.stop_reason(status, latest, task.trigger_id)[1]
            error = STOPPED if end == "interrupted" else None
            await tx.update(
                "tasks",
                task.id,
                status="finished",
                end_reason=end,
                error=error,
                finished=now,
                cancel_requested=True,
            )
            if latest == task.trigger_id:
                # A reply of the old driver may already wait on the channel row's lock; when
                # this commits, PostgreSQL re-checks that reply's condition on the channel row
                # alone, not on the task's new flag. Its trigger no longer being the channel's
                # latest is what refuses it then (C10's check, docs/cluster.md).
                await tx.update("channels", task.channel_id, last_trigger_id=None)
            await _withdraw_turns(tx, task.id)
            if end == "interrupted" and status == "active" and task.channel_id not in noted:
                noted.add(task.channel_id)
                reason = "the hub driving it stopped"
                note = (
                    wk.turn_interrupted(reason)
                    if channel is not None and channel.kind == "work"
                    else d.interrupted(reason)
                )
                await transcripts.post_as_system(tx, task.channel_id, note)
            ctx.events.record(
                tx,
                "task.interrupted" if end == "interrupted" else "task.finished",
                actor="system",
                subject=f"task:{task.id}",
                payload={
                    "end_reason": end,
                    "recovered": True,
                    "owner": row.owner,
                    "taken_over_by": me,
                    "lease_ran_out": lease_ran_out,
                },
            )
            done = row.model_copy(
                update={"status": "finished", "end_reason": end, "error": error, "finished": now}
            )
            why = LOST_LEASE if lease_ran_out else "the hub stopped while it ran"
            await hooks.taken_over(tx, done, why)
            ended.append(done)
        return ended

    return await ctx.store.write(job)


async def _withdraw_turns(tx: Tx, task_id: str) -> None:
    """Cancel the turns the task offered to remote agents and nobody has answered yet."""
    p = tx.table("pending_turns").c
    offered = await tx.select("pending_turns", p.task_id == task_id, p.status == "pending")
    for turn in offered:
        await tx.update("pending_turns", turn.id, status="cancelled")
