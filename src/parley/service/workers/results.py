"""How a child's work comes back (SPEC W3): its result, over-budget summaries stored as
artifacts, the ``task-result`` to the parent's session and the parent unblocked. Functions over
a worker's records (:class:`~.records.WorkerRecords`); the :class:`~.workers.Workers` service
exposes them as its methods.
"""

from __future__ import annotations

from parley.core import workers as wk
from parley.core.channels import LogicalSession, Task
from parley.core.errors import Conflict, InvalidRequest
from parley.core.identity import Principal
from parley.core.ids import new_id
from parley.core.mail import Message
from parley.core.ports import Tx
from parley.core.workers import Artifact, Worker, WorkerResult, WorkerState
from parley.service.workers.records import ResultSpec, WorkerRecords


async def finish_child(
    workers: WorkerRecords, tx: Tx, worker: Worker, result: WorkerResult, *, actor: str
) -> Worker:
    """End a child with its result and hand the result to the parent: a ``task-result``
    mail to the parent's session, and, when the parent blocked on this child, a message in
    the parent's channel that wakes it. A summary over the budget is stored as an artifact
    and only its reference travels (it would fill the parent's context)."""
    budget = workers.ctx.settings.worker_result_budget_tokens
    if wk.over_budget(result.summary, budget):
        artifact = Artifact(
            id=new_id("art-"),
            worker_id=worker.id,
            name="task-result summary",
            content=result.summary,
            created=workers.ctx.clock.now(),
        )
        tx.insert("worker_artifacts", artifact)
        result = result.model_copy(
            update={
                "summary": "",
                "artifact_id": artifact.id,
                "summary_tokens": wk.estimate_tokens(result.summary),
            }
        )
    else:
        result = result.model_copy(update={"summary_tokens": wk.estimate_tokens(result.summary)})
    to: WorkerState = "completed" if result.success else "failed"
    if to not in wk.TRANSITIONS[worker.state] and "running" in wk.TRANSITIONS[worker.state]:
        # A result reported before the turn started, or by an interrupted worker: it ran.
        worker = await workers.move(tx, worker, "running", actor=actor, reason="result reported")
    done = await workers.move(
        tx,
        worker,
        to,
        actor=actor,
        reason="result reported" if result.success else (result.error or "failed")[:300],
        result=result,
    )
    await deliver_result(workers, tx, done, result)
    return done


async def deliver_result(
    workers: WorkerRecords, tx: Tx, child: Worker, result: WorkerResult
) -> None:
    if child.parent_worker_id is None:
        return
    parent: Worker | None = await tx.get("workers", child.parent_worker_id, for_update=True)
    if parent is None:
        return
    session: LogicalSession | None = await tx.get("sessions", child.session_id)
    name = session.display_name if session else child.id
    text = wk.result_text(name, result)
    mail = await workers.mail.deliver_system(
        tx,
        parent.agent_id,
        "task-result",
        f"{name}: {'succeeded' if result.success else 'failed'}",
        text,
        {"worker_id": child.id, **result.model_dump(mode="json")},
        session_id=parent.session_id,
        from_id=child.id,
        correlation_id=child.dispatch_message_id,
    )
    workers.ctx.events.record(
        tx,
        "worker.result",
        actor=child.agent_id,
        subject=f"worker:{child.id}",
        payload={
            "parent_worker_id": parent.id,
            "success": result.success,
            "artifact_id": result.artifact_id,
            "summary_tokens": result.summary_tokens,
        },
        trace_id=child.trace_id,
        span_id=child.span_id,
        parent_span_id=child.parent_span_id,
    )
    blocked = (
        parent.blocked_on_message_id is not None
        and parent.blocked_on_message_id == child.dispatch_message_id
    )
    if not blocked:
        return
    agent = await workers.identity.get(parent.agent_id, tx)
    driven = not (parent.terminal or agent is None or agent.runtime_kind in ("remote", "none"))
    if driven and await _in_turn(tx, parent):
        # The parent is still working: a wake-up now would be its channel's newest trigger and
        # supersede that turn, whose reply would be lost. The result waits, pending session mail
        # (pushed into the live turn when its CLI takes input), and the parent stays blocked
        # until the turn ends: then it is woken (wake_after_turn).
        return
    await _wake(workers, tx, parent, mail.id, text, child.id, driven=driven)


async def _wake(
    workers: WorkerRecords,
    tx: Tx,
    parent: Worker,
    mail_id: str,
    text: str,
    child_id: str | None,
    *,
    driven: bool = True,
) -> None:
    await tx.update("workers", parent.id, blocked_on_message_id=None)
    parent = parent.model_copy(update={"blocked_on_message_id": None})
    workers.publish(tx, parent)
    # An agent the hub drives is woken in its channel; one connected from elsewhere (or
    # with no runtime) is woken by the task-result mail it is waiting for.
    if not driven:
        return
    # The task-result is the wake-up's own text: delivered by it, not again as a block.
    await tx.mark_delivered([mail_id], workers.ctx.clock.now())
    await workers.trigger(tx, parent, text, metadata={"child_worker_id": child_id})


async def _in_turn(tx: Tx, worker: Worker) -> bool:
    """Whether a turn of the worker runs now (on any hub): its task is not finished."""
    if worker.state != "running" or worker.task_id is None:
        return False
    task: Task | None = await tx.get("tasks", worker.task_id)
    return task is not None and task.channel_id == worker.channel_id and task.status == "running"


async def wake_after_turn(workers: WorkerRecords, tx: Tx, worker: Worker) -> None:
    """A parent's turn ended while the result it blocked on waited (``deliver_result``): wake
    it with that result now, as a parent that was not in a turn is woken at once. Not when
    the turn was cut (the worker waits for a resume, which reads the pending result) or the
    worker has ended; nor when the result was already read in the turn (pushed into it)."""
    if worker.blocked_on_message_id is None or worker.state != "idle":
        return
    m = tx.table("messages").c
    rows: list[Message] = await tx.select(
        "messages",
        m.to_kind == "session",
        m.to_id == worker.session_id,
        m.kind == "task-result",
        m.status == "pending",
        m.correlation_id == worker.blocked_on_message_id,
        limit=1,
    )
    if rows:
        await _wake(workers, tx, worker, rows[0].id, rows[0].body, rows[0].from_id)


async def report_result(
    workers: WorkerRecords, caller: Principal, worker_id: str | None, spec: ResultSpec
) -> Worker:
    """A child reports its result through a tool (an agent connected over MCP, or one that
    wants to attach artifacts): the worker ends, the parent gets the result, and a turn of
    it still waiting (a remote agent's pending turn) is no longer wanted."""

    async def job(tx: Tx) -> Worker:
        worker = await _reporting_worker(workers, tx, caller, worker_id)
        result = WorkerResult(
            summary=spec.summary,
            artifacts=list(spec.artifacts),
            success=spec.success,
            error=spec.error if not spec.success else None,
        )
        return await finish_child(workers, tx, worker, result, actor=caller.id)

    done = await workers.ctx.store.write(job)
    if done.task_id is not None:
        live = workers.tasks.live.get(done.task_id)
        if live is not None:
            live.cancel.set()
    return done


async def _reporting_worker(
    workers: WorkerRecords, tx: Tx, caller: Principal, worker_id: str | None
) -> Worker:
    if worker_id is None:
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select(
            "workers",
            w.agent_id == caller.id,
            w.parent_worker_id.is_not(None),
            w.state.not_in(list(wk.TERMINAL)),
            order_by=[w.id.desc()],
            limit=2,
        )
        if len(rows) != 1:
            raise InvalidRequest(
                f"{caller.id!r} has {'no' if not rows else 'several'} unfinished child "
                "workers; give 'worker_id'",
                code="worker_required",
            )
        worker_id = rows[0].id
    worker = await workers.load(tx, worker_id, for_update=True)
    await workers.check_own(tx, caller, worker, "report its result")
    if worker.parent_worker_id is None:
        raise InvalidRequest(
            f"worker {worker.id!r} has no parent to report to; release it instead",
            code="not_a_child",
        )
    if worker.terminal:
        raise Conflict(
            f"worker {worker.id!r} already ended ({worker.state!r})",
            code="worker_finished",
            state=worker.state,
        )
    return worker
