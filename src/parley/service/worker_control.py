"""Control of running workers (SPEC W5–W7): takeover, resume, release, heartbeats, the health
sweep and restart recovery. Functions over the :class:`~parley.service.workers.Workers`
service, which exposes them as its methods.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parley.core import workers as wk
from parley.core.channels import ChannelMessage
from parley.core.errors import Conflict, InvalidRequest, PermissionDenied
from parley.core.identity import Principal
from parley.core.limits import check_text
from parley.core.ports import Tx
from parley.core.workers import Worker

if TYPE_CHECKING:
    from parley.service.workers import Workers

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

    def as_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker.model_dump(mode="json"),
            "message_id": self.message_id,
            "interrupted": self.interrupted,
            "timed_out": self.timed_out,
            "waited_ms": round(self.waited_ms, 3),
            "task_id": self.task_id,
        }


async def takeover(
    workers: Workers,
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
    if len(instruction) > wk.INSTRUCTION_MAX_CHARS:
        raise InvalidRequest(
            f"the takeover instruction has {len(instruction)} characters; the limit is "
            f"{wk.INSTRUCTION_MAX_CHARS}",
            code="instruction_too_long",
        )
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
        ended = workers.turn_ended(live.task.id)
        if interrupt_first:
            live.cancel.set()
            interrupted = True
        try:
            await asyncio.wait_for(ended.wait(), timeout_s)
        except TimeoutError:
            # The envelope goes in anyway: posted as the channel's newest trigger it supersedes
            # the turn that would not stop, whose reply can then no longer commit (C10).
            timed_out = True
    waited_ms = (time.monotonic() - started) * 1000

    async def inject(tx: Tx) -> tuple[Worker, str | None]:
        current = await workers.load(tx, worker.id, for_update=True)
        if current.terminal:
            raise Conflict(
                f"worker {current.id!r} ended ({current.state!r}) during the takeover",
                code="worker_finished",
                state=current.state,
            )
        last = await _last_trigger(tx, current)
        envelope = wk.takeover_envelope(
            by=caller.display_name,
            instruction=instruction,
            interrupted=interrupted or current.state == "interrupted",
            working_on=last,
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


async def _last_trigger(tx: Tx, worker: Worker) -> str:
    """What the worker was working on: the text of its channel's latest trigger."""
    c = tx.table("channel_messages").c
    rows: list[ChannelMessage] = await tx.select(
        "channel_messages",
        c.channel_id == worker.channel_id,
        c.sender_kind != "agent",
        order_by=[c.seq.desc()],
        limit=1,
    )
    if not rows:
        return ""
    text = rows[0].content
    # Skip a pending-mail block in front of the task itself.
    if text.startswith("<pending_mail>") and "</pending_mail>" in text:
        text = text.split("</pending_mail>", 1)[1]
    return text.strip()


async def consume_takeover(workers: Workers, tx: Tx, worker: Worker, end: str) -> Worker:
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


async def resume(workers: Workers, caller: Principal, worker_id: str, note: str = "") -> Worker:
    """Resume an interrupted (or stale) worker: a new turn that says it was interrupted, with
    the session's pending mail in front (M5)."""
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
        last = await _last_trigger(tx, worker)
        what = last.splitlines()[0][:200] if last else "your last task"
        text = (
            f"[RESUME] Your work on: {what}\nwas interrupted ({worker.end_reason or 'stopped'}"
            f"{'; the parent that spawned you is gone' if worker.cancel_propagated_from else ''})"
            ". Continue where you left off."
        )
        if note.strip():
            text += f"\n\n<resume_note>\n{note.strip()}\n</resume_note>"
        workers.ctx.events.record(
            tx,
            "worker.resume_requested",
            actor=caller.id,
            subject=f"worker:{worker.id}",
            payload={"state": worker.state},
            trace_id=worker.trace_id,
        )
        task = await workers.trigger(tx, worker, text, metadata={"resume_by": caller.id})
        if task is None:
            raise Conflict(
                f"worker {worker.id!r}'s agent has no runtime to resume it with",
                code="no_runtime",
            )
        return await workers.load(tx, worker.id)

    return await workers.ctx.store.write(job)


async def release(workers: Workers, caller: Principal, worker_id: str) -> Worker:
    """Let an idle or stale worker go for good (RELEASED)."""

    async def job(tx: Tx) -> Worker:
        worker = await workers.load(tx, worker_id, for_update=True)
        if caller.id != worker.agent_id:
            await workers.check_control(tx, caller, worker, "release")
        return await workers.move(tx, worker, "released", actor=caller.id, reason="released")

    return await workers.ctx.store.write(job)


async def heartbeat(
    workers: Workers, caller: Principal, worker_id: str, *, long_running: bool | None = None
) -> Worker:
    """A sign of life from the worker's agent (or the operator); a stale worker runs again.
    ``long_running`` sets or clears the marker that keeps the health monitor quiet."""

    async def job(tx: Tx) -> Worker:
        worker = await workers.load(tx, worker_id, for_update=True)
        if not (caller.is_operator or caller.id == worker.agent_id):
            raise PermissionDenied(
                f"only worker {worker.id!r}'s own agent may send its heartbeat",
                code="worker_forbidden",
            )
        if worker.terminal:
            raise Conflict(
                f"worker {worker.id!r} already ended ({worker.state!r})",
                code="worker_finished",
                state=worker.state,
            )
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

    return await workers.ctx.store.write(job)


async def sweep_stale(workers: Workers) -> list[Worker]:
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


async def recover(workers: Workers) -> list[Worker]:
    """On start (W7): a worker left running by a hub that is gone is interrupted, and an
    unfinished child whose parent no longer exists (gone, killed or failed) is flagged with
    ``cancel_propagated_from`` and interrupted, to wait for a person to review and resume it.
    Nothing is resumed on its own: the turn that was cut may have had side effects."""
    store = workers.ctx.store

    async def job(tx: Tx) -> list[Worker]:
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select("workers", w.state.not_in(list(wk.TERMINAL)))
        changed: dict[str, Worker] = {}
        dead_owner: dict[str, bool] = {}
        for row in rows:
            owner = row.owner
            if owner is not None and owner != workers.hub_id and owner not in dead_owner:
                dead_owner[owner] = not await store.is_alive(owner)
            gone = owner is None or dead_owner.get(owner, False)
            if row.state == "running" and gone and row.task_id not in workers.tasks.live:
                changed[row.id] = await workers.move(
                    tx, row, "interrupted", actor="system", reason="the hub stopped while it ran"
                )
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
        return list(changed.values())

    return await store.write(job)
