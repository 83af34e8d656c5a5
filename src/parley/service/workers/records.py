"""A worker's record and what every part of the worker service does with it: load it, walk its
ancestors, decide who may see or control it, move it through its state machine
(``core/workers.py``) and publish the move, and post the trigger of its next turn.

:class:`~.workers.Workers` (start, spawn, the task hooks) and the functions of :mod:`.control`,
:mod:`.results`, :mod:`.views` and :mod:`.limits` all work through :class:`WorkerRecords`, so
those modules need not import the service that exposes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from parley.core import workers as wk
from parley.core.channels import Task
from parley.core.errors import Conflict, NotFound, PermissionDenied
from parley.core.identity import SYSTEM_ID, Principal
from parley.core.limits import StorableText, check_text
from parley.core.mail import Message
from parley.core.ports import SessionProcesses, Tx
from parley.core.workers import Worker, WorkerState
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.conversations.tasks import TaskRunner
from parley.service.conversations.transcripts import check_content
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail

log = logging.getLogger("parley.service.workers")

WORKERS_TOPIC = "workers"


def worker_topic(worker_id: str) -> str:
    return f"worker:{worker_id}"


class StartSpec(BaseModel):
    """A root worker: an agent given a task in a new logical session of its own."""

    agent_id: str | None = Field(
        default=None, description="The agent that runs it; an agent starting one may omit it."
    )
    prompt: StorableText = Field(min_length=1, max_length=wk.PROMPT_MAX_CHARS)
    name: StorableText | None = Field(default=None, max_length=wk.NAME_MAX)
    long_running: bool = False


class SpawnSpec(BaseModel):
    """A child of a worker (W3)."""

    prompt: StorableText = Field(min_length=1, max_length=wk.PROMPT_MAX_CHARS)
    agent_id: str | None = Field(
        default=None,
        description="The agent (and so the runtime) that runs the child; the parent's agent "
        "when omitted. Another agent must accept channels from the caller.",
    )
    inherit_context: bool = True
    purpose: StorableText = Field(default="task-dispatch", min_length=1, max_length=64)
    block_parent: bool = False
    independent: bool = False
    expected_artifacts: list[StorableText] = Field(default_factory=list, max_length=20)
    long_running: bool = False


class ResultSpec(BaseModel):
    """What a child reports when it finishes through a tool instead of its turn's reply."""

    summary: StorableText = Field(default="", max_length=wk.PROMPT_MAX_CHARS)
    artifacts: list[StorableText] = Field(default_factory=list, max_length=50)
    success: bool = True
    error: StorableText | None = Field(default=None, max_length=4000)


# A permission rule of ``core/workers.py``: (caller, worker, its ancestors) -> allowed.
Rule = Callable[[Principal, Worker, Sequence[Worker]], bool]


def worker_not_found(worker_id: str) -> NotFound:
    return NotFound(f"no worker {worker_id!r}", code="worker_not_found")


class WorkerRecords:
    """Loading, permissions, state moves and turns of workers, over the task runner."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        channels: Channels,
        tasks: TaskRunner,
        mail: Mail,
        hub_id: str,
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.channels = channels
        self.tasks = tasks
        self.mail = mail
        self.hub_id = hub_id
        # Turns whose worker a cancel already ended (KILLED is final): when they stop there is
        # nothing left to move, so their end skips a write; a tree of 100 stops 100 at once.
        self.killed_turns: set[str] = set()
        self._ending: set[asyncio.Task[None]] = set()

    # -- records and permissions ------------------------------------------------------------------
    async def load(self, tx: Tx, worker_id: str, *, for_update: bool = False) -> Worker:
        check_text(worker_id, "worker id")
        worker: Worker | None = await tx.get("workers", worker_id, for_update=for_update)
        if worker is None:
            raise worker_not_found(worker_id)
        return worker

    async def up(self, tx: Tx, worker: Worker) -> AsyncIterator[Worker]:
        """The worker's parent, its parent's parent, ... up to its root (nearest first), read
        one at a time, however deep; a worker met twice ends the walk (a cycle no spawn makes)."""
        seen = {worker.id}
        parent_id = worker.parent_worker_id
        while parent_id is not None and parent_id not in seen:
            parent: Worker | None = await tx.get("workers", parent_id)
            if parent is None:
                return
            yield parent
            seen.add(parent_id)
            parent_id = parent.parent_worker_id

    async def ancestors(self, tx: Tx, worker: Worker) -> list[Worker]:
        """The worker's parent, its parent's parent, ... up to its root (nearest first)."""
        return [parent async for parent in self.up(tx, worker)]

    async def allows(self, tx: Tx, rule: Rule, caller: Principal, worker: Worker) -> bool:
        """``rule`` (:func:`~parley.core.workers.may_control` or ``may_see``) for the caller
        on the worker. Both allow when the worker alone or any one ancestor does, so the parent
        chain is read only as far as it takes to decide."""
        if rule(caller, worker, ()):
            return True
        async for parent in self.up(tx, worker):
            if rule(caller, worker, (parent,)):
                return True
        return False

    async def may_control(self, tx: Tx, caller: Principal, worker: Worker) -> bool:
        return await self.allows(tx, wk.may_control, caller, worker)

    async def may_see(self, tx: Tx, caller: Principal, worker: Worker) -> bool:
        return await self.allows(tx, wk.may_see, caller, worker)

    async def check_control(self, tx: Tx, caller: Principal, worker: Worker, action: str) -> None:
        if await self.may_control(tx, caller, worker):
            return
        # Whoever may not see the worker is told what a read tells it: there is no such worker.
        if caller.id != worker.agent_id:
            raise worker_not_found(worker.id)
        raise PermissionDenied(
            f"{caller.id!r} may not {action} worker {worker.id!r}: only the operator and "
            "the worker's parent (whoever spawned or started it, or an ancestor) may",
            code="worker_forbidden",
        )

    async def check_own(self, tx: Tx, caller: Principal, worker: Worker, action: str) -> None:
        """Only the worker's own agent and the operator may ``action`` (its heartbeat, its
        result); whoever may not even see it is told there is no such worker."""
        if caller.is_operator or caller.id == worker.agent_id:
            return
        if not await self.may_see(tx, caller, worker):
            raise worker_not_found(worker.id)
        raise PermissionDenied(
            f"only worker {worker.id!r}'s own agent may {action}", code="worker_forbidden"
        )

    async def visible(self, tx: Tx, caller: Principal, worker_id: str) -> Worker:
        worker = await self.load(tx, worker_id)
        if not await self.may_see(tx, caller, worker):
            # Not told apart from a missing one: ids of others' workers are not disclosed.
            raise worker_not_found(worker_id)
        return worker

    # -- the state machine ------------------------------------------------------------------------
    async def move(
        self,
        tx: Tx,
        worker: Worker,
        to: WorkerState,
        *,
        actor: str,
        reason: str,
        **values: Any,
    ) -> Worker:
        """Apply one transition of the table (illegal ones raise), record it as an event with
        the worker's trace ids and publish the new state after commit."""
        wk.check_transition(worker.id, worker.state, to)
        now = self.ctx.clock.now()
        values = {"state": to, "updated": now, **values}
        if to in wk.TERMINAL:
            values.setdefault("ended", now)
            # The stored reason is a short label (64 characters on PostgreSQL); the whole
            # reason is in the event below, and an error in the result.
            values.setdefault("end_reason", reason[:64])
        await tx.update(
            "workers",
            worker.id,
            **{
                k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
                for k, v in values.items()
            },
        )
        moved = worker.model_copy(update=values)
        if to in wk.TERMINAL:
            # A worker that ended has no next turn: a process kept for its session goes now.
            tx.after_commit(lambda: self._end_processes_later(moved))
        self.ctx.events.record(
            tx,
            f"worker.{to}",
            actor=actor,
            subject=f"worker:{worker.id}",
            payload={"from": worker.state, "to": to, "reason": reason},
            trace_id=moved.trace_id,
            span_id=moved.span_id,
            parent_span_id=moved.parent_span_id,
        )
        self.publish(tx, moved)
        return moved

    async def end_processes(self, workers: Sequence[Worker]) -> None:
        """Stop the processes the workers' runtimes keep for their sessions (Claude Code kept
        between turns), and everything those started."""
        for worker in workers:
            agent = await self.identity.get(worker.agent_id)
            runtime = self.tasks.runtime_for(agent) if agent is not None else None
            if isinstance(runtime, SessionProcesses):
                try:
                    await runtime.end_session(worker.session_id)
                except Exception:
                    log.exception("stopping the processes of worker %r failed", worker.id)

    def _end_processes_later(self, worker: Worker) -> None:
        task = asyncio.ensure_future(self.end_processes([worker]))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    def publish(self, tx: Tx, worker: Worker) -> None:
        data = {"type": "worker", "worker": worker.model_dump(mode="json")}
        self.ctx.bus.publish_on_commit(tx, worker_topic(worker.id), data)
        self.ctx.bus.publish_on_commit(tx, WORKERS_TOPIC, data)

    # -- turns ------------------------------------------------------------------------------------
    async def trigger(
        self, tx: Tx, worker: Worker, content: str, *, metadata: dict[str, Any] | None = None
    ) -> Task | None:
        """Post ``content`` into the worker's channel as a trigger from the hub, with the
        session's pending mail in front of it as one block (M5), and start its turn in the same
        transaction. The sender is the system: in a work channel a post by the agent itself
        would not wake it, and a child may run as its parent's own agent."""
        block = await self.take_session_mail(tx, worker.session_id, worker)
        text = f"{block}\n\n{content}" if block else content
        check_content(text, "the worker's turn", self.ctx.settings.message_max_bytes)
        channel = await tx.get_channel(worker.channel_id, for_update=True)
        if channel is None or channel.status != "active":
            raise Conflict(
                f"worker {worker.id!r} has no open channel to run in",
                code="worker_channel_closed",
            )
        message = await self.channels.append(
            tx,
            worker.channel_id,
            sender_id=SYSTEM_ID,
            sender_kind="system",
            content=text,
            trigger=True,
            metadata={"worker_id": worker.id, **(metadata or {})},
        )
        return await self.tasks.start_task(tx, channel, message)

    async def take_session_mail(self, tx: Tx, session_id: str, worker: Worker | None = None) -> str:
        """The pending mail addressed to the session, marked delivered, as one context block:
        a worker that starts or resumes reads it before its first turn (M5). A result the
        ``worker`` blocked on, read there, no longer blocks it."""
        m = tx.table("messages").c
        rows: list[Message] = await tx.select(
            "messages",
            m.to_kind == "session",
            m.to_id == session_id,
            m.status == "pending",
            # A takeover is delivered as a takeover envelope, never as information in the block.
            m.kind != "takeover",
            order_by=[m.seq],
            limit=50,
        )
        if not rows:
            return ""
        await tx.mark_delivered([r.id for r in rows], self.ctx.clock.now())
        blocked_on = worker.blocked_on_message_id if worker is not None else None
        read = {r.correlation_id for r in rows if r.kind == "task-result"}
        if worker is not None and blocked_on is not None and blocked_on in read:
            await tx.update("workers", worker.id, blocked_on_message_id=None)
            self.publish(tx, worker.model_copy(update={"blocked_on_message_id": None}))
        return wk.mail_block([(r.kind, r.from_id, r.subject, r.body) for r in rows])

    async def of_channel(self, tx: Tx, channel_id: str) -> Worker | None:
        """The unfinished worker bound to a channel, if any (the newest)."""
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select(
            "workers",
            w.channel_id == channel_id,
            w.state.not_in(list(wk.TERMINAL)),
            order_by=[w.id.desc()],
            limit=1,
        )
        return rows[0] if rows else None
