"""Workers (SPEC W1–W8, M5): start, spawn, result, cancel and the views of the worker tree.

A worker is one execution instance of an agent in a logical session. Its turns are the task
runner's wake tasks in the channel its session is bound to, so a worker's turn is superseded,
cancelled, traced and recovered exactly like any other turn: the worker service only decides
what to post as the trigger (a task-dispatch, a takeover envelope, a resume) and moves the
worker through its state machine (``core/workers.py``) as the tasks start and end. Cancel,
takeover, heartbeats, the health sweep and restart recovery are in
:mod:`parley.service.workers.control`, results in :mod:`parley.service.workers.results` and the
views in :mod:`parley.service.workers.views`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from parley.core import workers as wk
from parley.core.channels import Channel, ChannelMessage, LogicalSession, Task
from parley.core.errors import Conflict, InvalidRequest, NotFound
from parley.core.identity import SYSTEM_ID, Principal
from parley.core.ids import new_id
from parley.core.limits import json_bytes
from parley.core.ports import Tx
from parley.core.runtime import Turn
from parley.core.workers import Artifact, Worker, WorkerResult
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.conversations.tasks import TaskRunner
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail
from parley.service.quotas import Ticket
from parley.service.workers import control as worker_control
from parley.service.workers import limits as worker_limits
from parley.service.workers import live_mail
from parley.service.workers import results as worker_results
from parley.service.workers import views as worker_views
from parley.service.workers.records import (
    ResultSpec,
    SpawnSpec,
    StartSpec,
    WorkerRecords,
    worker_not_found,
)

log = logging.getLogger("parley.service.workers")

INHERITED_MESSAGES = 20


class Workers(WorkerRecords):
    """The worker service: one instance per hub. Its records, permissions and state moves are
    :class:`~.records.WorkerRecords`'; it hears of its turns' tasks through the task hooks."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        channels: Channels,
        tasks: TaskRunner,
        mail: Mail,
        hub_id: str,
    ) -> None:
        super().__init__(ctx, identity, channels, tasks, mail, hub_id)
        tasks.hooks.on_started(self.on_task_started)
        tasks.hooks.on_finished(self.on_task_finished)
        tasks.hooks.on_taken_over(self.on_task_taken_over)
        tasks.hooks.while_running(self.push_mail_while_running)

    async def push_mail_while_running(self, turn: Turn) -> None:
        """Session mail that arrives while a turn runs goes into it, if its CLI takes input."""
        await live_mail.push_while_running(self, turn)

    async def on_task_started(self, tx: Tx, channel: Channel, task: Task) -> None:
        """A turn started in a worker's channel: the worker runs, with this turn as its span."""
        if channel.kind != "work":
            return
        worker = await self.of_channel(tx, channel.id)
        if worker is None:
            return
        values: dict[str, Any] = {
            "task_id": task.id,
            "span_id": task.id,
            "last_heartbeat": self.ctx.clock.now(),
            "owner": self.hub_id,
        }
        # A turn someone else started (a person posting to the worker) reads the session's
        # pending mail too: as a block after its trigger, which its transcript quotes.
        block = await self.take_session_mail(tx, worker.session_id, worker)
        if block:
            await self.channels.append(
                tx,
                channel.id,
                sender_id=SYSTEM_ID,
                sender_kind="system",
                content=block,
                metadata={"worker_id": worker.id, "pending_mail": True},
            )
            worker = await self.load(tx, worker.id)  # a result read there unblocked it
        if worker.state == "running":
            await tx.update("workers", worker.id, **values)
            self.publish(tx, worker.model_copy(update=values))
            return
        await self.move(tx, worker, "running", actor="system", reason="turn started", **values)

    async def on_task_finished(self, task: Task) -> None:
        """A turn ended: a child reports its result, a root worker waits for more work, and a
        takeover's turn marks the takeover consumed. Only a work channel's turn (``wake``) can
        be a worker's: no other takes a transaction here."""
        if task.id in self.killed_turns:
            self.killed_turns.discard(task.id)
        elif task.mode == "wake":
            await self.ctx.store.write(lambda tx: self._turn_finished(tx, task))

    async def on_task_taken_over(self, tx: Tx, task: Task, why: str) -> None:
        """Another hub's turn was ended by a takeover in ``tx`` (its hub died, or stopped
        renewing its lease while alive, paused say): the worker's turn ends with it, here,
        since the hub that drove it writes nothing more of it."""
        if task.mode == "wake":
            await self._turn_finished(tx, task, why=why)

    async def _turn_finished(self, tx: Tx, task: Task, why: str | None = None) -> None:
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select(
            "workers",
            w.channel_id == task.channel_id,
            w.state.not_in(sorted(wk.TERMINAL)),
            limit=2,
        )
        for row in rows:
            worker = await self.load(tx, row.id, for_update=True)
            if worker.terminal:
                continue  # ended meanwhile (cancel, report_result)
            if worker.task_id == task.id:
                await self._worker_turn_finished(tx, worker, task, why)
            elif await self._is_takeover_turn(tx, worker, task):
                # A takeover's own turn superseded by a newer post still consumed the
                # takeover: the envelope is in the channel, so the newer turn reads it; left
                # pending, the mark would refuse every later takeover.
                await worker_control.consume_takeover(self, tx, worker, task.end_reason or "")

    async def _worker_turn_finished(
        self, tx: Tx, worker: Worker, task: Task, why: str | None
    ) -> None:
        end = task.end_reason or "failed"
        now = self.ctx.clock.now()
        if worker.pending_takeover_message_id is not None and why is not None:
            # Its hub died (or stopped renewing) mid-takeover: no turn of that hub will deliver
            # or finish the takeover, so it is held for the resume to re-deliver.
            worker = await worker_control.hold_takeover(self, tx, worker, why)
        elif await self._is_takeover_turn(tx, worker, task):
            # Only the turn the envelope started consumes the takeover: the interrupted turn may
            # still have ended with a reply of its own before the cancel reached it.
            worker = await worker_control.consume_takeover(self, tx, worker, end)
        if end in ("replied", "dormant"):
            reply = await self._reply_of(tx, task)
            if worker.parent_worker_id is not None:
                result = WorkerResult(summary=reply.content if reply else "", success=True)
                await worker_results.finish_child(self, tx, worker, result, actor=worker.agent_id)
            else:
                await self.move(
                    tx, worker, "idle", actor="system", reason="turn ended", last_heartbeat=now
                )
        elif end == "failed":
            error = task.error or "the turn failed"
            if worker.parent_worker_id is not None:
                result = WorkerResult(success=False, error=error)
                await worker_results.finish_child(self, tx, worker, result, actor="system")
            else:
                # One failed turn does not end a root worker: it waits for more work, and the
                # failure is on record in the task and this event.
                await self.move(
                    tx, worker, "idle", actor="system", reason=f"turn failed: {error}"[:300]
                )
        elif end in ("cancelled", "interrupted"):
            reason = f"turn {end}" + (f": {why}" if why and end == "interrupted" else "")
            await self.move(
                tx, worker, "interrupted", actor="system", reason=reason, last_heartbeat=now
            )
        elif end in ("deleted", "closed"):
            await self.move(tx, worker, "killed", actor="system", reason=f"channel {end}")
        if end in ("replied", "dormant", "failed"):
            # A result its parent blocked on, held back while this turn ran, wakes it now.
            await worker_results.wake_after_turn(self, tx, await self.load(tx, worker.id))

    async def _is_takeover_turn(self, tx: Tx, worker: Worker, task: Task) -> bool:
        """Whether ``task`` is the turn the worker's pending takeover envelope started."""
        pending = worker.pending_takeover_message_id
        if pending is None:
            return False
        trigger: ChannelMessage | None = await tx.get("channel_messages", task.trigger_id)
        return trigger is not None and trigger.metadata.get("takeover_message_id") == pending

    async def _reply_of(self, tx: Tx, task: Task) -> ChannelMessage | None:
        c = tx.table("channel_messages").c
        rows: list[ChannelMessage] = await tx.select(
            "channel_messages",
            c.task_id == task.id,
            c.sender_kind == "agent",
            order_by=[c.seq.desc()],
            limit=1,
        )
        return rows[0] if rows else None

    # -- start and spawn --------------------------------------------------------------------------
    async def _new_session(
        self,
        tx: Tx,
        caller: Principal,
        agent: Principal,
        name: str,
        watchers: Sequence[str],
        **links: Any,
    ) -> LogicalSession:
        """A logical session bound to a new private work channel of ``agent``; ``watchers``
        (the parent's agent) are members too, so they can read it and post to the child."""
        now = self.ctx.clock.now()
        channel = Channel(
            id=new_id(),
            name=name,
            kind="work",
            private=True,
            created_by=caller.id,
            created=now,
            discussion_rounds=1,
            turn_timeout_s=self.ctx.settings.turn_timeout_s,
            owner_agent_id=agent.id,
            metadata={"worker_session": True},
        )
        members = [agent.id, *(m for m in watchers if m != agent.id)]
        tx.insert("channels", channel)
        self.ctx.events.record(
            tx,
            "channel.created",
            actor=caller.id,
            subject=f"channel:{channel.id}",
            payload={"kind": "work", "members": members, "name": name},
        )
        await tx.flush()
        await tx.set_members(channel.id, members)
        session = LogicalSession(
            id=new_id("vs-"),
            agent_id=agent.id,
            channel_id=channel.id,
            display_name=name,
            created=now,
            **links,
        )
        tx.insert("sessions", session)
        return session

    async def _agent(self, tx: Tx, agent_id: str) -> Principal:
        agent = await self.identity.get(agent_id, tx)
        if agent is None or agent.kind != "agent":
            raise NotFound(f"no agent {agent_id!r}", code="agent_not_found")
        return agent

    def _new_worker(
        self,
        caller: Principal,
        agent: Principal,
        session: LogicalSession,
        *,
        trace_id: str | None = None,
        **values: Any,
    ) -> Worker:
        now = self.ctx.clock.now()
        worker_id = new_id("w-")
        return Worker(
            id=worker_id,
            agent_id=agent.id,
            session_id=session.id,
            channel_id=session.channel_id,
            trace_id=trace_id or new_id("tr-"),
            created_by=caller.id,
            created=now,
            updated=now,
            last_heartbeat=now,
            owner=self.hub_id,
            **values,
        )

    async def start(self, caller: Principal, spec: StartSpec) -> Worker:
        """A root worker: a new logical session of the agent, its first turn started with the
        prompt. The operator starts one for any agent; an agent for itself, or for an agent
        that accepts channels from it."""
        agent_id = spec.agent_id or (caller.id if caller.kind == "agent" else None)
        if agent_id is None:
            raise InvalidRequest(
                "name the agent that runs the worker in 'agent_id'", code="agent_required"
            )

        async def job(tx: Tx, ticket: Ticket) -> Worker:
            agent = await self._agent(tx, agent_id)
            if agent.id != caller.id:
                await self.channels.check_consent(tx, caller, [agent.id])
            # The prompt is stored as the first turn's text: the caller's, like a post.
            ticket.charge(messages=1, nbytes=len(spec.prompt.encode()))
            name = spec.name or wk.child_name(agent.display_name, spec.prompt)
            session = await self._new_session(tx, caller, agent, name, [caller.id])
            worker = self._new_worker(
                caller, agent, session, purpose="root", long_running=spec.long_running
            )
            tx.insert("workers", worker)
            await tx.flush()
            self._record_created(tx, caller, worker)
            self.publish(tx, worker)
            await self.trigger(tx, worker, spec.prompt)
            return await self.load(tx, worker.id)

        return await worker_limits.charged(self, caller, job)

    def _record_created(self, tx: Tx, caller: Principal, worker: Worker) -> None:
        self.ctx.events.record(
            tx,
            "worker.created",
            actor=caller.id,
            subject=f"worker:{worker.id}",
            payload={
                "agent_id": worker.agent_id,
                "session_id": worker.session_id,
                "parent_worker_id": worker.parent_worker_id,
                "purpose": worker.purpose,
                "independent": worker.independent,
            },
            trace_id=worker.trace_id,
            parent_span_id=worker.parent_span_id,
        )

    async def own_worker(self, caller: Principal) -> Worker:
        """The caller's worker in its main session (its work channel), made on first use: an
        agent connected over MCP spawns children from it."""
        if caller.kind != "agent" or caller.work_channel_id is None:
            raise InvalidRequest(
                f"{caller.id!r} has no work channel; give 'parent_worker_id'",
                code="worker_required",
            )
        channel_id = caller.work_channel_id
        async with self.ctx.store.read() as tx:
            found = await self.of_channel(tx, channel_id)
        if found is not None:
            return found

        async def job(tx: Tx) -> Worker:
            await tx.get_channel(channel_id, for_update=True)  # one maker at a time
            found = await self.of_channel(tx, channel_id)
            if found is not None:
                return found
            session = await self.channels.session(tx, caller, channel_id)
            worker = self._new_worker(caller, caller, session, purpose="main")
            tx.insert("workers", worker)
            await tx.flush()
            self._record_created(tx, caller, worker)
            # The agent is calling the hub right now: it is running, and when it calls from a
            # turn of its work channel, that turn is the worker's, so its end makes it idle.
            in_flight = [
                lv.task for lv in self.tasks.live.values() if lv.task.channel_id == channel_id
            ]
            values = {"task_id": in_flight[-1].id, "span_id": in_flight[-1].id} if in_flight else {}
            return await self.move(
                tx, worker, "running", actor=caller.id, reason="agent active", **values
            )

        return await self.ctx.store.write(job)

    async def spawn(self, caller: Principal, parent_id: str | None, spec: SpawnSpec) -> Worker:
        """Spawn a child of ``parent_id`` (the caller's own main worker when None): a child
        session named ``"<parent> / <slug>"``, both sides of the relation recorded, the
        ``task-dispatch`` mail and the child's first turn, all in one commit (W3)."""
        if parent_id is None:
            parent_id = (await self.own_worker(caller)).id

        async def job(tx: Tx, ticket: Ticket) -> Worker:
            parent = await self.load(tx, parent_id, for_update=True)
            if not await self.may_see(tx, caller, parent):
                # Refused as a read of it would be: the caller is not told it exists.
                raise worker_not_found(parent.id)
            if parent.terminal:
                raise Conflict(
                    f"worker {parent.id!r} is {parent.state!r}; a finished worker cannot spawn",
                    code="worker_finished",
                    state=parent.state,
                )
            await worker_limits.check_room(self, tx, parent)
            await self.ctx.usage.refuse_spent_tree(tx, parent)
            agent = await self._agent(tx, spec.agent_id or parent.agent_id)
            if agent.id not in (caller.id, parent.agent_id):
                await self.channels.check_consent(tx, caller, [agent.id])
            parent_session: LogicalSession | None = await tx.get("sessions", parent.session_id)
            parent_name = parent_session.display_name if parent_session else parent.agent_id
            name = wk.child_name(parent_name, spec.prompt)
            inherited = await self._inherited(tx, parent) if spec.inherit_context else ""
            session = await self._new_session(
                tx,
                caller,
                agent,
                name,
                [parent.agent_id],
                parent_logical_id=parent.session_id,
                spawned_by_worker_id=parent.id,
                spawn_purpose=spec.purpose,
            )
            child = self._new_worker(
                caller,
                agent,
                session,
                trace_id=parent.trace_id,
                purpose=spec.purpose,
                parent_worker_id=parent.id,
                parent_span_id=parent.span_id,
                independent=spec.independent,
                block_parent=spec.block_parent,
                long_running=spec.long_running,
            )
            subject = f"Task from {parent_name}: {spec.prompt.strip().splitlines()[0][:120]}"
            payload = {
                "prompt": spec.prompt,
                "inherited_context": inherited,
                "expected_artifacts": list(spec.expected_artifacts),
                "worker_id": child.id,
                "parent_worker_id": parent.id,
                "purpose": spec.purpose,
            }
            text = wk.dispatch_text(
                parent_name=parent_name,
                prompt=spec.prompt,
                purpose=spec.purpose,
                inherited_context=inherited,
                expected_artifacts=spec.expected_artifacts,
            )
            # A spawn stores the prompt three times (the dispatch's body and payload, the
            # child's first turn): what it stores is what it costs the caller.
            dispatch_size = json_bytes(
                {"subject": subject, "body": spec.prompt, "payload": payload}
            )
            ticket.charge(messages=1, nbytes=dispatch_size + len(text.encode()))
            dispatch = await self.mail.deliver_system(
                tx,
                agent.id,
                "task-dispatch",
                subject,
                spec.prompt,
                payload,
                session_id=session.id,
                from_id=parent.id,
            )
            child.dispatch_message_id = dispatch.id
            tx.insert("workers", child)
            await tx.flush()
            # The dispatch is the turn's own text: delivered by the trigger, not as a block.
            await tx.mark_delivered([dispatch.id], self.ctx.clock.now())
            parent_values: dict[str, Any] = {
                "children_worker_ids": [*parent.children_worker_ids, child.id],
                "updated": self.ctx.clock.now(),
            }
            if spec.block_parent:
                parent_values["blocked_on_message_id"] = dispatch.id
            await tx.update("workers", parent.id, **parent_values)
            self.publish(tx, parent.model_copy(update=parent_values))
            self._record_created(tx, caller, child)
            self.ctx.events.record(
                tx,
                "worker.spawned",
                actor=caller.id,
                subject=f"worker:{parent.id}",
                payload={
                    "child_worker_id": child.id,
                    "child_session_id": session.id,
                    "name": name,
                    "purpose": spec.purpose,
                    "block_parent": spec.block_parent,
                    "independent": spec.independent,
                    "dispatch_message_id": dispatch.id,
                },
                trace_id=parent.trace_id,
                span_id=parent.span_id,
            )
            self.publish(tx, child)
            await self.trigger(tx, child, text, metadata={"dispatch_message_id": dispatch.id})
            return await self.load(tx, child.id)

        return await worker_limits.charged(self, caller, job)

    async def _inherited(self, tx: Tx, parent: Worker) -> str:
        """The parent's recent work, bounded and quoted: what a child inherits when asked to."""
        messages = await tx.channel_messages(parent.channel_id, latest=INHERITED_MESSAGES)
        return wk.inherited_context(
            [(m.sender_id, m.content) for m in messages], wk.INHERITED_CONTEXT_CHARS
        )

    # -- results (service/worker_results.py) -------------------------------------------------------
    async def report_result(
        self, caller: Principal, worker_id: str | None, spec: ResultSpec
    ) -> Worker:
        return await worker_results.report_result(self, caller, worker_id, spec)

    # -- views (service/worker_views.py) ---------------------------------------------------------
    async def get(self, caller: Principal, worker_id: str) -> Worker:
        return await worker_views.get(self, caller, worker_id)

    async def listing(
        self, caller: Principal, *, state: Sequence[str] = (), limit: int = 200
    ) -> list[Worker]:
        """Workers the caller may see, newest first."""
        return await worker_views.listing(self, caller, state=state, limit=limit)

    async def tree(self, caller: Principal, worker_id: str) -> list[dict[str, Any]]:
        return await worker_views.tree(self, caller, worker_id)

    async def topology(self, caller: Principal, session_id: str) -> dict[str, Any]:
        return await worker_views.topology(self, caller, session_id)

    async def artifact(self, caller: Principal, artifact_id: str) -> Artifact:
        return await worker_views.artifact(self, caller, artifact_id)

    # -- control (service/worker_control.py) ------------------------------------------------------
    async def cancel(
        self,
        caller: Principal,
        worker_id: str,
        *,
        reason: str = "cancelled",
        propagate: bool = True,
        force: bool = False,
    ) -> list[Worker]:
        return await worker_control.cancel(
            self, caller, worker_id, reason=reason, propagate=propagate, force=force
        )

    async def takeover(
        self,
        caller: Principal,
        worker_id: str,
        instruction: str,
        *,
        interrupt_first: bool = True,
        timeout_s: float = 5.0,
    ) -> worker_control.TakeoverOutcome:
        return await worker_control.takeover(
            self,
            caller,
            worker_id,
            instruction,
            interrupt_first=interrupt_first,
            timeout_s=timeout_s,
        )

    async def resume(self, caller: Principal, worker_id: str, note: str = "") -> Worker:
        return await worker_control.resume(self, caller, worker_id, note)

    async def release(self, caller: Principal, worker_id: str) -> Worker:
        return await worker_control.release(self, caller, worker_id)

    async def heartbeat(
        self, caller: Principal, worker_id: str, *, long_running: bool | None = None
    ) -> Worker:
        return await worker_control.heartbeat(self, caller, worker_id, long_running=long_running)

    async def heartbeat_all(
        self, caller: Principal, *, long_running: bool | None = None
    ) -> list[Worker]:
        return await worker_control.heartbeat_all(self, caller, long_running=long_running)

    async def sweep_stale(self) -> list[Worker]:
        return await worker_control.sweep_stale(self)

    async def recover(self, *, at_start: bool = True) -> list[Worker]:
        return await worker_control.recover(self, at_start=at_start)
