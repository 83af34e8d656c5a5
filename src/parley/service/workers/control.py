"""Control of running workers (SPEC W4–W7): cancel, takeover, resume, release, heartbeats, the
health sweep and restart recovery. Functions over a worker's records
(:class:`~.records.WorkerRecords`); the :class:`~.workers.Workers` service exposes them as its
methods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parley.core import workers as wk
from parley.core.channels import ChannelMessage
from parley.core.errors import Conflict, InvalidRequest
from parley.core.identity import Principal
from parley.core.limits import check_length, check_text
from parley.core.mail import Message
from parley.core.ports import Tx
from parley.core.workers import Worker, WorkerResult
from parley.service.workers import results as worker_results
from parley.service.workers.records import WorkerRecords

MAX_TAKEOVER_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TakeoverOutcome:
    """What a takeover did: the takeover message (its id tracks it), whether a running turn
    was interrupted, whether waiting for it to stop timed out, and the turn it started."""

    worker: Worker
    message_id: str
    interrupted: bool
    timed_out: bool
    waited_ms: float
    task_id: str | None


async def takeover(
    workers: WorkerRecords,
    caller: Principal,
    worker_id: str,
    instruction: str,
    *,
    interrupt_first: bool = True,
    timeout_s: float = 5.0,
) -> TakeoverOutcome:
    """One operation (W5): ``system.takeover_initiated`` → interrupt the running turn → wait
    for it to end or ``timeout_s`` → the envelope, as the trigger of the worker's next turn →
    ``pending_takeover_message_id`` held until that turn ends → ``system.takeover_consumed``.
    Without ``interrupt_first`` the running turn is left to finish (up to ``timeout_s``)."""
    check_text(instruction, "instruction")
    if not instruction.strip():
        raise InvalidRequest("the takeover instruction is empty", code="empty_instruction")
    check_length(instruction, "the takeover instruction", wk.INSTRUCTION_MAX_CHARS)
    if not 0 <= timeout_s <= MAX_TAKEOVER_TIMEOUT_S:
        raise InvalidRequest(
            f"timeout_s {timeout_s!r} is out of range; give 0 to {MAX_TAKEOVER_TIMEOUT_S:g}",
            code="invalid_timeout",
        )

    async def begin(tx: Tx) -> tuple[Worker, str]:
        worker = await workers.load(tx, worker_id, for_update=True)
        await workers.check_control(tx, caller, worker, "take over")
        if worker.terminal or worker.state == "pending":
            raise Conflict(
                f"worker {worker.id!r} is {worker.state!r}; only a started, unfinished worker "
                "can be taken over",
                code="worker_not_takeable",
                state=worker.state,
            )
        if worker.pending_takeover_message_id is not None:
            raise Conflict(
                f"worker {worker.id!r} has a takeover in progress "
                f"({worker.pending_takeover_message_id!r}); wait until its turn ends",
                code="takeover_pending",
            )
        # A takeover a hub crash cut (held, waiting for a resume) is replaced by this one: the
        # newest instruction is the one the worker follows.
        replaced = await _consume_held(workers, tx, worker)
        message = await workers.mail.deliver_system(
            tx,
            worker.agent_id,
            "takeover",
            f"Takeover by {caller.display_name}",
            instruction,
            {"instruction": instruction, "interrupt_first": interrupt_first, "by": caller.id},
            session_id=worker.session_id,
            from_id=caller.id,
        )
        values = {"pending_takeover_message_id": message.id, "updated": workers.ctx.clock.now()}
        await tx.update("workers", worker.id, **values)
        worker = worker.model_copy(update=values)
        workers.ctx.events.record(
            tx,
            "system.takeover_initiated",
            actor=caller.id,
            subject=f"worker:{worker.id}",
            payload={
                "message_id": message.id,
                "interrupt_first": interrupt_first,
                "timeout_s": timeout_s,
                "task_id": worker.task_id,
                "replaces": [m.id for m in replaced],
            },
            trace_id=worker.trace_id,
            span_id=worker.span_id,
            parent_span_id=worker.parent_span_id,
        )
        workers.publish(tx, worker)
        return worker, message.id

    worker, message_id = await workers.ctx.store.write(begin)
    started = time.monotonic()
    interrupted = timed_out = False
    live = workers.tasks.live.get(worker.task_id) if worker.task_id else None
    if live is not None and live.runner is not None and not live.runner.done():
        if interrupt_first:
            live.cancel.set()
            interrupted = True
        # Timed out or not, the envelope goes in: posted as the channel's newest trigger it
        # supersedes the turn that would not stop, whose reply can then no longer commit (C10).
        timed_out = not await wait_turn(workers, live.task.id, timeout_s)
    waited_ms = round((time.monotonic() - started) * 1000, 3)

    async def inject(tx: Tx) -> tuple[Worker, str | None]:
        current = await workers.load(tx, worker.id, for_update=True)
        if current.terminal:
            raise Conflict(
                f"worker {current.id!r} ended ({current.state!r}) during the takeover",
                code="worker_finished",
                state=current.state,
            )
        if current.pending_takeover_message_id is None:
            # A lease sweep held it while this hub waited (it was paused): it is delivered now.
            await tx.update("workers", current.id, pending_takeover_message_id=message_id)
            current = current.model_copy(update={"pending_takeover_message_id": message_id})
        envelope = wk.takeover_envelope(
            by=caller.display_name,
            instruction=instruction,
            interrupted=interrupted or current.state == "interrupted",
            working_on=await working_on(tx, current),
        )
        # The takeover mail is the envelope's own text: delivered by it, not as a block.
        await tx.mark_delivered([message_id], workers.ctx.clock.now())
        task = await workers.trigger(
            tx, current, envelope, metadata={"takeover_message_id": message_id, "by": caller.id}
        )
        return await workers.load(tx, worker.id), task.id if task else None

    after, task_id = await workers.ctx.store.write(inject)
    return TakeoverOutcome(
        worker=after,
        message_id=message_id,
        interrupted=interrupted,
        timed_out=timed_out,
        waited_ms=waited_ms,
        task_id=task_id,
    )


async def wait_turn(workers: WorkerRecords, task_id: str, timeout_s: float | None = None) -> bool:
    """Wait (at most ``timeout_s``) for a turn this hub has in flight to end; whether it has.
    Its runner returns only once the turn's end is recorded and its worker moved (the task's
    end callbacks ran). A turn not in flight here is not waited for."""
    live = workers.tasks.live.get(task_id)
    if live is None or live.runner is None:
        return True
    done, _ = await asyncio.wait({live.runner}, timeout=timeout_s)
    return bool(done)


async def working_on(tx: Tx, worker: Worker) -> str:
    """What the worker works on: the text of the newest message of its channel that states its
    work (a person's post, its start prompt or task-dispatch), not the hub's notes and envelopes
    about it (an interruption note, a resume, a takeover, a pending-mail block). Its envelopes
    name it (:func:`~parley.core.workers.task_line`)."""
    c = tx.table("channel_messages").c
    before: list[Any] = []
    while True:
        rows: list[ChannelMessage] = await tx.select(
            "channel_messages",
            c.channel_id == worker.channel_id,
            c.sender_id != worker.agent_id,
            *before,
            order_by=[c.seq.desc()],
            limit=50,
        )
        for row in rows:
            if wk.is_task_message(row.sender_kind, row.metadata):
                return row.content
        if len(rows) < 50:
            return ""
        before = [c.seq < rows[-1].seq]


async def _held_takeovers(tx: Tx, worker: Worker) -> list[Message]:
    """The worker's takeovers a hub crash cut and recovery held, oldest first: its takeover
    mail that no turn consumed (a takeover's own turn, or a newer takeover, consumes it), other
    than the one in progress. Expired mail counts: a takeover is an instruction about the
    worker, waiting for it to run again, not news that goes stale while nobody reads it."""
    m = tx.table("messages").c
    rows: list[Message] = await tx.select(
        "messages",
        m.to_kind == "session",
        m.to_id == worker.session_id,
        m.kind == "takeover",
        m.status.in_(["pending", "delivered", "expired"]),
        m.consumed_at.is_(None),
        order_by=[m.seq],
    )
    return [r for r in rows if r.id != worker.pending_takeover_message_id]


async def _consume_held(workers: WorkerRecords, tx: Tx, worker: Worker) -> list[Message]:
    """Mark the worker's held takeovers consumed (a newer takeover replaces them); them."""
    held = await _held_takeovers(tx, worker)
    await _consume(workers, tx, held)
    return held


async def _consume(workers: WorkerRecords, tx: Tx, messages: list[Message]) -> None:
    now = workers.ctx.clock.now()
    for message in messages:
        await tx.update(
            "messages", message.id, status="read", delivered_at=now, read_at=now, consumed_at=now
        )


async def _name_of(workers: WorkerRecords, tx: Tx, principal_id: str) -> str:
    found = await workers.identity.get(principal_id, tx)
    return found.display_name if found is not None else principal_id


async def hold_takeover(workers: WorkerRecords, tx: Tx, worker: Worker, why: str) -> Worker:
    """A hub crash cut the takeover in progress (before its envelope was posted, or during the
    envelope's turn): no turn will consume it, so it is held, not lost. The worker's mark is
    cleared (a new takeover is accepted, and the worker can go stale); its mail stays
    unconsumed, and so held: the next resume re-delivers it as a takeover envelope, or a new
    takeover replaces it."""
    message_id = worker.pending_takeover_message_id
    assert message_id is not None
    now = workers.ctx.clock.now()
    await tx.update("workers", worker.id, pending_takeover_message_id=None, updated=now)
    worker = worker.model_copy(update={"pending_takeover_message_id": None, "updated": now})
    workers.ctx.events.record(
        tx,
        "system.takeover_held",
        actor="system",
        subject=f"worker:{worker.id}",
        payload={"message_id": message_id, "task_id": worker.task_id, "reason": why},
        trace_id=worker.trace_id,
        span_id=worker.span_id,
        parent_span_id=worker.parent_span_id,
    )
    return worker


async def consume_takeover(workers: WorkerRecords, tx: Tx, worker: Worker, end: str) -> Worker:
    """The takeover's turn ended (``end``: how): clear the pending mark and record it."""
    message_id = worker.pending_takeover_message_id
    assert message_id is not None
    now = workers.ctx.clock.now()
    await tx.update("messages", message_id, status="read", read_at=now, consumed_at=now)
    await tx.update("workers", worker.id, pending_takeover_message_id=None, updated=now)
    worker = worker.model_copy(update={"pending_takeover_message_id": None, "updated": now})
    workers.ctx.events.record(
        tx,
        "system.takeover_consumed",
        actor=worker.agent_id,
        subject=f"worker:{worker.id}",
        payload={"message_id": message_id, "task_id": worker.task_id, "turn_ended": end},
        trace_id=worker.trace_id,
        span_id=worker.span_id,
        parent_span_id=worker.parent_span_id,
    )
    return worker


async def cancel(
    workers: WorkerRecords,
    caller: Principal,
    worker_id: str,
    *,
    reason: str = "cancelled",
    propagate: bool = True,
    force: bool = False,
) -> list[Worker]:
    """Cancel a worker and, recursively, its children except independent ones (W4); return
    the workers cancelled. Their turns are really stopped: the cancel signal reaches the
    runtime (every process a command agent started is ended) and this returns once they
    ended; the processes kept for their sessions are stopped too."""
    check_text(reason, "reason")
    check_length(reason, "the cancel reason", wk.CANCEL_REASON_MAX_CHARS)

    async def job(tx: Tx) -> list[Worker]:
        root = await workers.load(tx, worker_id, for_update=True)
        await workers.check_control(tx, caller, root, "cancel")
        if root.terminal:
            raise Conflict(
                f"worker {root.id!r} already ended ({root.state!r})",
                code="worker_finished",
                state=root.state,
            )
        w = tx.table("workers").c
        tree: list[Worker] = await tx.select("workers", w.trace_id == root.trace_id)
        children_of: dict[str, list[Worker]] = {}
        for worker in sorted(tree, key=lambda x: x.id):
            if worker.parent_worker_id is not None:
                children_of.setdefault(worker.parent_worker_id, []).append(worker)
        cancelled: list[Worker] = []
        for worker, source in wk.cancel_plan(root, children_of, propagate=propagate):
            killed = await workers.move(
                tx,
                worker,
                "killed",
                actor=caller.id,
                reason=reason,
                cancel_propagated_from=source,
            )
            if worker.task_id is not None:
                await tx.update("tasks", worker.task_id, cancel_requested=True)
            cancelled.append(killed)
        ids = {x.id for x in cancelled}
        for killed in cancelled:
            parent_id = killed.parent_worker_id
            if parent_id is not None and parent_id not in ids:
                # The parent lives on: it learns that its child will not report.
                error = f"cancelled by {caller.id}: {reason}"
                await worker_results.deliver_result(
                    workers, tx, killed, WorkerResult(success=False, error=error[:4000])
                )
        workers.ctx.events.record(
            tx,
            "worker.cancel",
            actor=caller.id,
            subject=f"worker:{root.id}",
            payload={
                "reason": reason,
                "force": force,
                "propagate": propagate,
                "cancelled": [x.id for x in cancelled],
            },
            trace_id=root.trace_id,
            span_id=root.span_id,
        )
        return cancelled

    cancelled = await workers.ctx.store.write(job)
    task_ids = [w.task_id for w in cancelled if w.task_id]
    # A turn still live here has yet to end, and its end will find its worker KILLED.
    workers.killed_turns.update(t for t in task_ids if t in workers.tasks.live)
    await _stop_turns(workers, task_ids, force=force)
    # Their turns ended: the processes kept for their sessions go too, before this returns.
    await workers.end_processes(cancelled)
    return cancelled


async def _stop_turns(workers: WorkerRecords, task_ids: Sequence[str], *, force: bool) -> None:
    """Signal the turns to stop and wait until their runtimes let go. ``force`` does not wait
    for a runtime's own cooperative stop: the task is cancelled outright, and the runtime's
    cleanup (its processes ended) runs as it unwinds."""
    runners = []
    for task_id in task_ids:
        live = workers.tasks.live.get(task_id)
        if live is None:
            continue
        live.cancel.set()
        if live.runner is not None:
            if force:
                live.runner.cancel()
            runners.append(live.runner)
    if runners:
        # Waiting neither cancels them nor raises what they raise.
        await asyncio.wait(runners)


async def resume(
    workers: WorkerRecords, caller: Principal, worker_id: str, note: str = ""
) -> Worker:
    """Resume an interrupted (or stale) worker: a new turn that says it was interrupted and
    names its task, with the session's pending mail in front (M5), and a takeover a hub crash
    cut (held) after it, as a takeover envelope that this turn consumes."""
    check_text(note, "note")

    async def job(tx: Tx) -> Worker:
        worker = await workers.load(tx, worker_id, for_update=True)
        await workers.check_control(tx, caller, worker, "resume")
        if worker.state not in ("interrupted", "stale", "idle"):
            raise Conflict(
                f"worker {worker.id!r} is {worker.state!r}; only an interrupted, stale or idle "
                "worker can be resumed",
                code="worker_not_resumable",
                state=worker.state,
            )
        task_text = await working_on(tx, worker)
        text = wk.resume_text(
            last_trigger=task_text,
            reason=worker.end_reason or "stopped",
            orphaned=worker.cancel_propagated_from is not None,
            note=note,
        )
        metadata: dict[str, Any] = {"resume_by": caller.id}
        held = await _held_takeovers(tx, worker)
        if held:
            # A takeover a crash cut goes in as a takeover, not as mail: the newest one (an
            # older one it replaced is consumed with it); this turn consumes it when it ends.
            *older, newest = held
            await _consume(workers, tx, older)
            text += "\n\n" + wk.takeover_envelope(
                by=await _name_of(workers, tx, newest.from_id),
                instruction=str(newest.payload.get("instruction") or newest.body),
                interrupted=True,
                working_on=task_text,
            )
            await tx.mark_delivered([newest.id], workers.ctx.clock.now())
            await tx.update("workers", worker.id, pending_takeover_message_id=newest.id)
            worker = worker.model_copy(update={"pending_takeover_message_id": newest.id})
            metadata["takeover_message_id"] = newest.id
            workers.ctx.events.record(
                tx,
                "system.takeover_redelivered",
                actor=caller.id,
                subject=f"worker:{worker.id}",
                payload={"message_id": newest.id, "replaced": [m.id for m in older]},
                trace_id=worker.trace_id,
            )
        workers.ctx.events.record(
            tx,
            "worker.resume_requested",
            actor=caller.id,
            subject=f"worker:{worker.id}",
            payload={"state": worker.state},
            trace_id=worker.trace_id,
        )
        task = await workers.trigger(tx, worker, text, metadata=metadata)
        if task is None:
            raise Conflict(
                f"worker {worker.id!r}'s agent has no runtime to resume it with",
                code="no_runtime",
            )
        return await workers.load(tx, worker.id)

    return await workers.ctx.store.write(job)


async def release(workers: WorkerRecords, caller: Principal, worker_id: str) -> Worker:
    """Let an idle or stale worker go for good (RELEASED); the process kept for its session
    (and everything it started) is gone when this returns."""

    async def job(tx: Tx) -> Worker:
        worker = await workers.load(tx, worker_id, for_update=True)
        if caller.id != worker.agent_id:
            await workers.check_control(tx, caller, worker, "release")
        return await workers.move(tx, worker, "released", actor=caller.id, reason="released")

    released = await workers.ctx.store.write(job)
    await workers.end_processes([released])
    return released


async def heartbeat(
    workers: WorkerRecords, caller: Principal, worker_id: str, *, long_running: bool | None = None
) -> Worker:
    """A sign of life from the worker's agent (or the operator); a stale worker runs again.
    ``long_running`` sets or clears the marker that keeps the health monitor quiet."""

    async def job(tx: Tx) -> Worker:
        worker = await workers.load(tx, worker_id, for_update=True)
        await workers.check_own(tx, caller, worker, "send its heartbeat")
        if worker.terminal:
            raise Conflict(
                f"worker {worker.id!r} already ended ({worker.state!r})",
                code="worker_finished",
                state=worker.state,
            )
        return await _beat(workers, tx, caller, worker, long_running)

    return await workers.ctx.store.write(job)


async def heartbeat_all(
    workers: WorkerRecords, caller: Principal, *, long_running: bool | None = None
) -> list[Worker]:
    """A heartbeat for every unfinished worker of the caller's agent (newest first), in one
    commit."""

    async def job(tx: Tx) -> list[Worker]:
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select(
            "workers",
            w.agent_id == caller.id,
            w.state.not_in(list(wk.TERMINAL)),
            order_by=[w.id.desc()],
        )
        beaten = []
        for row in rows:
            worker = await workers.load(tx, row.id, for_update=True)
            if not worker.terminal:
                beaten.append(await _beat(workers, tx, caller, worker, long_running))
        return beaten

    return await workers.ctx.store.write(job)


async def _beat(
    workers: WorkerRecords, tx: Tx, caller: Principal, worker: Worker, long_running: bool | None
) -> Worker:
    values: dict[str, Any] = {"last_heartbeat": workers.ctx.clock.now()}
    if long_running is not None:
        values["long_running"] = long_running
    if worker.state == "stale":
        return await workers.move(
            tx, worker, "running", actor=caller.id, reason="heartbeat", **values
        )
    await tx.update("workers", worker.id, **values)
    worker = worker.model_copy(update=values)
    workers.publish(tx, worker)
    return worker


async def sweep_stale(workers: WorkerRecords) -> list[Worker]:
    """The health monitor (W6): a running or idle worker silent past the threshold becomes
    stale, unless a takeover is pending or it is long-running. A turn this hub has in flight
    counts as a heartbeat: the hub itself observes that the worker is alive."""
    now = workers.ctx.clock.now()
    threshold = workers.ctx.settings.worker_stale_after_s
    in_flight = set(workers.tasks.live)

    async def job(tx: Tx) -> list[Worker]:
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select("workers", w.state.in_(["running", "idle"]))
        moved = []
        for row in rows:
            if row.task_id in in_flight:
                await tx.update("workers", row.id, last_heartbeat=now)
                continue
            if wk.is_stale(row, now, threshold):
                worker = await workers.load(tx, row.id, for_update=True)
                if wk.is_stale(worker, now, threshold):
                    silent = (now - worker.last_heartbeat).total_seconds()
                    moved.append(
                        await workers.move(
                            tx,
                            worker,
                            "stale",
                            actor="system",
                            reason=f"no heartbeat for {silent:.0f} s (threshold {threshold:g} s)",
                        )
                    )
        return moved

    return await workers.ctx.store.write(job)


async def recover(workers: WorkerRecords, *, at_start: bool = True) -> list[Worker]:
    """On start (W7): a worker left running by a hub that is gone is interrupted, and an
    unfinished child whose parent no longer exists (gone, killed or failed) is flagged with
    ``cancel_propagated_from`` and interrupted, to wait for a person to review and resume it.
    Nothing is resumed on its own: the turn that was cut may have had side effects.

    The lease sweep (``at_start=False``) only interrupts the running workers of hubs that are
    gone: while hubs run, a child whose parent was cancelled is independent by choice (W4)
    and keeps running."""
    store = workers.ctx.store
    dead_owner: dict[str, bool] = {workers.hub_id: False}

    async def cut_off(row: Worker) -> bool:
        """Running, but not here, under a hub that is gone."""
        owner = row.owner
        if row.state != "running" or row.task_id in workers.tasks.live:
            return False
        if owner is not None and owner not in dead_owner:
            dead_owner[owner] = not await store.is_alive(owner)
        return owner is None or dead_owner[owner]

    if not at_start:
        # The sweep runs every few seconds: look without locks first, and only at running
        # workers (orphans are flagged at start only); most of the time there is nothing to do.
        async with store.read() as rtx:
            w = rtx.table("workers").c
            running: list[Worker] = await rtx.select("workers", w.state == "running")
        if not [r for r in running if await cut_off(r)]:
            return []

    async def job(tx: Tx) -> list[Worker]:
        w = tx.table("workers").c
        state = w.state.not_in(list(wk.TERMINAL)) if at_start else w.state == "running"
        rows: list[Worker] = await tx.select("workers", state)
        changed: dict[str, Worker] = {}
        for row in rows:
            if await cut_off(row):
                reason = "the hub stopped while it ran"
                if row.pending_takeover_message_id is not None:
                    row = await hold_takeover(workers, tx, row, reason)
                changed[row.id] = await workers.move(
                    tx, row, "interrupted", actor="system", reason=reason
                )
        if at_start:
            await _flag_orphans(workers, tx, rows, changed)
        return list(changed.values())

    return await store.write(job)


async def _flag_orphans(
    workers: WorkerRecords, tx: Tx, rows: list[Worker], changed: dict[str, Worker]
) -> None:
    """Flag (and interrupt) every unfinished worker whose parent is gone, killed or failed;
    what changed is added to ``changed``."""
    every: dict[str, Worker] = {r.id: changed.get(r.id, r) for r in rows}
    parents = {r.parent_worker_id for r in rows if r.parent_worker_id}
    for parent_id in parents - set(every):
        parent: Worker | None = await tx.get("workers", parent_id)
        if parent is not None:
            every[parent_id] = parent
    for orphan in wk.orphans(list(every.values()), every):
        if orphan.cancel_propagated_from is not None:
            continue
        values = {"cancel_propagated_from": orphan.parent_worker_id}
        if orphan.state in ("interrupted",):
            await tx.update("workers", orphan.id, **values)
            flagged = orphan.model_copy(update=values)
            workers.publish(tx, flagged)
            workers.ctx.events.record(
                tx,
                "worker.orphaned",
                actor="system",
                subject=f"worker:{orphan.id}",
                payload={"parent_worker_id": orphan.parent_worker_id},
                trace_id=orphan.trace_id,
            )
        else:
            flagged = await workers.move(
                tx,
                orphan,
                "interrupted",
                actor="system",
                reason=f"orphaned: parent {orphan.parent_worker_id} no longer exists",
                **values,
            )
        changed[orphan.id] = flagged
