"""Discussion tasks: the loop that gives members their turns (C5–C7, C10–C13).

A trigger message (a user's message in a group, the moderator's kickoff in a discussion, any
message to an agent in its work channel) starts a task with a snapshot of the speakers and the
rounds. A newer trigger supersedes the running task: it gets a cancel flag, and — the part that
makes it safe — a reply is appended only if its trigger is still the channel's latest trigger,
checked and appended in one transaction under the channel row lock (the linearisation point;
see docs/supersede.md). Cancellation is best effort; the check at commit is what guarantees that
no stale reply is ever accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from parley.core import discussion as d
from parley.core.channels import (
    TRANSCRIPT_WINDOW,
    Channel,
    ChannelMessage,
    EndReason,
    Invocation,
    InvocationOutcome,
    LogicalSession,
    SenderKind,
    Task,
    TaskMode,
    refuse_meeting_channel,
)
from parley.core.errors import NotFound, ParleyError, PermissionDenied, RuntimeFailure
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.limits import check_text
from parley.core.ports import Page, Runtime, Tx
from parley.core.redact import redact_text, scrub, secret_values
from parley.core.runtime import (
    NO_REPLY,
    AgentProfile,
    ToolBox,
    TranscriptEntry,
    Turn,
    TurnResult,
)
from parley.service.context import ServiceContext
from parley.service.conversations import recovery as task_recovery
from parley.service.conversations import runners
from parley.service.conversations.channels import Channels, Posted, channel_topic, check_content
from parley.service.identity import Identity

log = logging.getLogger("parley.tasks")


@dataclass
class TurnOutcome:
    kind: InvocationOutcome | None  # None: skipped
    voted: bool = False
    reason: str | None = None
    message: ChannelMessage | None = None
    end: EndReason | None = None  # how a rejected turn ends its task
    error: str | None = None


@dataclass
class _Live:
    """In-process state of a running task."""

    task: Task
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    # Monotonic time the next turn became due (launch, then the end of each turn): queue time.
    ready_at: float = 0.0


class TaskRunner:
    """Starts, drives, supersedes, cancels and reports discussion tasks."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        channels: Channels,
        runtime_for: Callable[[Principal], Runtime | None],
        hub_id: str,
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.channels = channels
        self.runtime_for = runtime_for
        self.hub_id = hub_id
        self.live: dict[str, _Live] = {}
        # Awaited with the finished task once its end has committed.
        self.on_finished: list[Callable[[Task], Awaitable[None]]] = []
        # (tx, channel, task) -> Awaitable[None], in the transaction that starts the task: a
        # worker becomes running in the same commit as its turn's task.
        self.on_started: list[Callable[[Tx, Channel, Task], Awaitable[None]]] = []
        # (tx, ended task, why) -> Awaitable[None], in the transaction of a takeover that ended
        # another hub's task (task_recovery): a worker's turn ends in the same commit.
        self.on_taken_over: list[Callable[[Tx, Task, str], Awaitable[None]]] = []
        # Told, in the trigger's transaction, of a trigger for an agent without a runtime.
        self.notify_idle_agent: (
            Callable[[Tx, Principal, ChannelMessage], Awaitable[None]] | None
        ) = None
        # (agent, channel_id, session_id) -> ToolBox | None: the hub's tools for a turn (W9).
        self.toolbox_for: Callable[[Principal, str, str], ToolBox | None] = lambda *_: None
        # Test seams for race tests: awaited right before the runtime is called and right
        # between the runtime's return and the commit of its reply (Turn) -> Awaitable[None].
        self.before_call: Callable[[Turn], Awaitable[None]] | None = None
        self.before_commit: Callable[[Turn], Awaitable[None]] | None = None

    # -- triggers ---------------------------------------------------------------------------------
    async def post_trigger(
        self,
        caller: Principal,
        channel_id: str,
        content: str,
        *,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
        then: Callable[[Tx, ChannelMessage], Awaitable[None]] | None = None,
    ) -> Posted:
        async def job(tx: Tx) -> Posted:
            channel = await tx.get_channel(channel_id, for_update=True)
            if channel is None or channel.status == "deleted":
                raise NotFound(f"no channel {channel_id!r}", code="channel_not_found")
            if not (caller.is_operator or caller.id in channel.members):
                raise PermissionDenied(
                    f"{caller.id!r} is not a member of channel {channel_id!r} and may not post",
                    code="not_a_member",
                )
            refuse_meeting_channel(channel, "take posts from the channel routes")
            kind: SenderKind = "agent" if caller.kind == "agent" else "human"
            closed = channel.status == "closed"
            is_trigger = not closed and d.is_trigger(
                channel.kind, sender_kind=kind, own_work_channel=caller.id == channel.owner_agent_id
            )
            message = await self.channels.append(
                tx,
                channel_id,
                sender_id=caller.id,
                sender_kind=kind,
                content=content,
                reply_to=reply_to,
                trigger=is_trigger,
                metadata=metadata,
            )
            if then is not None:
                await then(tx, message)
            if closed and channel.kind == "discussion":
                # Kept for the record, answered only by the moderator's closed template (C8).
                await self.channels.post_as_moderator(tx, channel_id, d.CHANNEL_CLOSED)
            if not is_trigger:
                return Posted(message=message)
            task = await self.start_task(tx, channel, message)
            return Posted(message=message, task_id=task.id if task else None)

        return await self.ctx.store.write(job)

    async def supersede_running(self, tx: Tx, channel_id: str) -> list[str]:
        """Flag the channel's running tasks cancelled; their in-process runners are signalled
        once this transaction commits."""
        t = tx.table("tasks").c
        running = await tx.select("tasks", t.channel_id == channel_id, t.status == "running")
        ids = [old.id for old in running]
        for old_id in ids:
            await tx.update("tasks", old_id, cancel_requested=True)
        if ids:
            tx.after_commit(lambda: self._signal(ids))
        return ids

    def _signal(self, task_ids: list[str]) -> None:
        for old in task_ids:
            live = self.live.get(old)
            if live is not None:
                live.cancel.set()

    async def start_task(self, tx: Tx, channel: Channel, trigger: ChannelMessage) -> Task | None:
        """Inside the trigger's transaction: flag running tasks superseded and record the new
        task with its snapshot of speakers and rounds (C12). The task is launched by the commit
        itself (after-commit), so a caller that goes away after committing cannot strand it."""
        superseded = await self.supersede_running(tx, channel.id)
        speakers: list[str] = []
        for member in channel.members:
            agent = await self.identity.get(member, tx)
            if agent is None or agent.kind != "agent":
                continue
            if channel.kind == "work" and agent.id != channel.owner_agent_id:
                continue
            if agent.runtime_kind == "none":
                if channel.kind == "work" and self.notify_idle_agent is not None:
                    await self.notify_idle_agent(tx, agent, trigger)
                continue
            speakers.append(agent.id)
        if not speakers:
            return None
        mode: TaskMode = {"work": "wake", "discussion": "discussion"}.get(channel.kind, "group")  # type: ignore[assignment]
        now = self.ctx.clock.now()
        task = Task(
            id=new_ulid(),
            channel_id=channel.id,
            trigger_id=trigger.id,
            mode=mode,
            members=speakers,
            rounds=1 if mode == "wake" else channel.discussion_rounds,
            owner=self.hub_id,
            lease_until=now + timedelta(seconds=self.ctx.settings.lease_s),
            created=now,
        )
        tx.insert("tasks", task)
        self.ctx.events.record(
            tx,
            "task.started",
            actor="system",
            subject=f"task:{task.id}",
            payload={
                "channel_id": channel.id,
                "trigger_id": trigger.id,
                "mode": mode,
                "members": speakers,
                "rounds": task.rounds,
                "superseded": list(superseded),
            },
            trace_id=task.id,
        )
        for callback in self.on_started:
            await callback(tx, channel, task)
        self._publish_task(tx, task)
        tx.after_commit(lambda: self.launch(task))
        return task

    def launch(self, task: Task) -> None:
        live = _Live(task, ready_at=self.ctx.clock.monotonic())
        self.live[task.id] = live
        live.runner = asyncio.create_task(self._run(live), name=f"parley-task-{task.id}")

    def _publish_task(self, tx: Tx, task: Task) -> None:
        data = {"type": "task", "task": task.model_dump(mode="json")}
        topic = channel_topic(task.channel_id)
        self.ctx.bus.publish_on_commit(tx, topic, data)

    # -- the loop ---------------------------------------------------------------------------------
    async def _run(self, live: _Live) -> None:
        task = live.task
        end: str | None = None
        failed_member: str | None = None
        error: str | None = None
        try:
            async with self.ctx.store.read() as tx:
                channel = await tx.get_channel(task.channel_id)
                trigger = await tx.get("channel_messages", task.trigger_id)
                window = await tx.channel_messages(task.channel_id, latest=TRANSCRIPT_WINDOW)
            assert channel is not None and trigger is not None
            names = await self._names(channel)
            context = _Context(channel, trigger, window, names, self._task_text(channel, trigger))
            end, failed_member, error = await self._rounds(live, context)
        except asyncio.CancelledError:
            end, error = "interrupted", "the hub stopped while the task ran"
            raise
        except Exception as exc:  # a bug or a store failure: never leave a task running
            log.exception("task %s failed", task.id)
            end, error = "failed", redact_text(f"{exc.__class__.__name__}: {exc}")
        finally:
            self.live.pop(task.id, None)
            with contextlib.suppress(Exception):
                await asyncio.shield(self._finish(task, end or "failed", failed_member, error))

    async def _rounds(self, live: _Live, context: _Context) -> tuple[str, str | None, str | None]:
        """Run the rounds; return (end reason, failed member, error)."""
        task = live.task
        for number in range(1, task.rounds + 1):
            tally = d.RoundTally(number)
            await self._set_round(task, number, context)
            for member in task.members:
                if live.cancel.is_set():
                    return (await self._stop_reason(task))[1], None, None
                outcome = await self._turn(live, context, member, number)
                live.ready_at = self.ctx.clock.monotonic()
                if outcome.kind == "failed":
                    return "failed", member, outcome.reason
                if outcome.kind == "rejected" and outcome.reason == "publish_failed":
                    return "failed", member, outcome.error
                if outcome.kind == "rejected":
                    return outcome.end or "cancelled", None, None
                if outcome.kind == "accepted":
                    tally.spoke.add(member)
                if outcome.voted:
                    tally.voted.add(member)
            if task.mode == "wake":
                return ("replied" if tally.spoke else "dormant"), None, None
            if tally.unanimous(task.members):
                return "unanimous", None, None
            if tally.silent:
                return ("idle" if task.mode == "discussion" else "dormant"), None, None
        return "max_rounds", None, None

    def _task_text(self, channel: Channel, trigger: ChannelMessage) -> str:
        if channel.kind == "discussion":
            return str(channel.metadata.get("discussGuide") or trigger.content)
        return trigger.content

    async def _names(self, channel: Channel) -> dict[str, str]:
        names = {"moderator": "moderator", "system": "system"}
        for member in channel.members:
            p = await self.identity.get(member)
            if p is not None:
                names[member] = p.display_name
        return names

    async def _stop_reason(self, task: Task, tx: Tx | None = None) -> tuple[str, EndReason]:
        """The C10 code and end reason of a task that may not go on (``d.stop_reason``)."""
        if tx is None:
            async with self.ctx.store.read() as rtx:
                return await self._stop_reason(task, rtx)
        row: Task | None = await tx.get("tasks", task.id)
        if row is not None and row.status == "finished" and row.end_reason is not None:
            # Another hub took the task over and ended it (this hub lost its lease).
            return "cancelled", row.end_reason
        channel: Channel | None = await tx.get("channels", task.channel_id)
        if channel is None:
            return d.stop_reason(None, None, task.trigger_id)
        return d.stop_reason(channel.status, channel.last_trigger_id, task.trigger_id)

    async def _set_round(self, task: Task, number: int, context: _Context) -> None:
        """Record the round, and bring the transcript up to date: within a round the commits
        themselves keep it current (see _append_reply), a round starts from what the store
        holds."""
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> list[ChannelMessage]:
            await tx.update(
                "tasks",
                task.id,
                current_round=number,
                calls=task.calls,
                accepted=task.accepted,
                lease_until=now + timedelta(seconds=self.ctx.settings.lease_s),
            )
            task.current_round = number
            self._publish_task(tx, task)
            return await tx.channel_messages(
                task.channel_id, after_seq=context.last_seq, latest=TRANSCRIPT_WINDOW
            )

        for message in await self.ctx.store.write(job, eager=True):
            context.add(message)

    async def _turn(self, live: _Live, ctx: _Context, member: str, number: int) -> TurnOutcome:
        task = live.task
        clock = self.ctx.clock
        t0 = clock.monotonic()
        agent = await self.identity.require(member)
        session: LogicalSession | None = ctx.sessions.get(member)
        if session is None:
            session = await self.ctx.store.write(
                lambda tx: self.channels.session(tx, agent, task.channel_id), eager=True
            )
            ctx.sessions[member] = session
        if session.model_override == NO_REPLY:
            return TurnOutcome(kind=None)
        window, entries, transcript_chars = ctx.transcript()
        prompt = d.build_prompt(
            agent_id=agent.id,
            agent_name=agent.display_name,
            persona=agent.persona,
            mode=task.mode,
            members=task.members,
            names=ctx.names,
            round_number=number,
            rounds=task.rounds,
            task=ctx.task_text,
            window=window,
            entries=entries,
        )
        t1 = clock.monotonic()
        invocation_id = new_ulid()
        runtime: Runtime | None = self.runtime_for(agent)
        trace = _TraceBase(
            invocation_id,
            task,
            member,
            number,
            window,
            prompt.char_count(transcript_chars),
            t0,
            t1,
            live.ready_at,
        )
        if runtime is None:
            return TurnOutcome(kind=None)
        turn = Turn(
            invocation_id=invocation_id,
            agent=AgentProfile(
                id=agent.id,
                display_name=agent.display_name,
                workspace=agent.workspace,
                persona=agent.persona,
                runtime=agent.runtime,
            ),
            channel_id=task.channel_id,
            session_id=session.id,
            prompt=prompt,
            timeout_s=ctx.channel.turn_timeout_s,
            cancel=live.cancel,
            round=number,
            trigger_id=task.trigger_id,
            task_id=task.id,
            runtime_state=dict(session.runtime_state),
            tools=self.toolbox_for(agent, task.channel_id, session.id),
        )
        try:
            if self.before_call is not None:
                await self.before_call(turn)
            result = await runtime.respond(turn)
            if self.before_commit is not None:
                await self.before_commit(turn)
        except RuntimeFailure as failure:
            t2 = clock.monotonic()
            # Members read the task's error and route: scrubbed here too, whatever the runtime.
            secrets = secret_values(agent.runtime)
            # A failed call still names the route it took (C13): which provider failed matters.
            trace.route = scrub(str(failure.details.get("model_route") or ""), secrets)
            trace.facts = _failure_facts(failure)
            if failure.reason == "cancelled":
                code, end = await self._record(trace, "rejected", None, None, t2, stopped=True)
                return TurnOutcome(kind="rejected", reason=code, end=end)
            await self._record(trace, "failed", failure.code, None, t2)
            message = scrub(failure.message, secrets)
            return TurnOutcome(kind="failed", reason=f"{failure.code}: {message}")
        t2 = clock.monotonic()
        if result.runtime_state is not None and result.runtime_state != session.runtime_state:
            await self._save_runtime_state(ctx, session, result.runtime_state)
        reply = d.parse_reply(result.text)
        if reply.silent:
            await self._record(trace, "silent", None, result, t2)
            return TurnOutcome(kind="silent", voted=reply.voted_done)
        problem = self._unpublishable(reply.content)
        if problem is not None:
            # Nothing is stored (C10 publish_failed) and the member is named as failed (C11):
            # a reply the channel cannot hold is not silently cut or dropped.
            await self._record(trace, "rejected", "publish_failed", result, t2)
            return TurnOutcome(kind="rejected", reason="publish_failed", error=problem)
        return await self._append_reply(live, ctx, trace, result, reply, t2)

    def _unpublishable(self, content: str) -> str | None:
        """Why a reply cannot be posted in a channel (the limits a post has), or None."""
        try:
            check_content(content, "the reply", self.ctx.settings.message_max_bytes)
        except ParleyError as refusal:
            return f"publish_failed: {refusal.message}"
        return None

    async def _save_runtime_state(
        self, ctx: _Context, session: LogicalSession, state: dict[str, Any]
    ) -> None:
        """Keep the runtime's own session (a Claude Code session id, a Codex thread) on the
        logical session, so the next turn resumes it (W1 RuntimeSubSession)."""

        async def job(tx: Tx) -> None:
            await tx.update("sessions", session.id, runtime_state=state)

        await self.ctx.store.write(job)
        ctx.sessions[session.agent_id] = session.model_copy(update={"runtime_state": state})

    async def _append_reply(
        self,
        live: _Live,
        ctx: _Context,
        trace: _TraceBase,
        result: TurnResult,
        reply: d.Reply,
        t2: float,
    ) -> TurnOutcome:
        task = live.task

        async def job(tx: Tx) -> tuple[TurnOutcome, list[ChannelMessage]]:
            # The linearisation point (C10): checking that the trigger is still the channel's
            # latest and claiming the reply's position are one statement under the channel row
            # lock; a newer trigger commits either wholly before it (the reply is rejected) or
            # wholly after the reply.
            seq = await tx.claim_channel_seq(
                task.channel_id,
                trigger_id=task.trigger_id,
                task_id=task.id,
                now=self.ctx.clock.now(),
            )
            if seq is None:
                reason, end = await self._stop_reason(task, tx)
                self._insert_invocation(tx, trace, "rejected", reason, result, None, t2)
                outcome = TurnOutcome(kind="rejected", reason=reason, end=end)
                return outcome, []
            missed: list[ChannelMessage] = []
            if seq != ctx.last_seq + 1:
                # Something else landed in the channel since this task last looked; read it in
                # this transaction so that the next speaker's transcript has no hole.
                missed = await tx.channel_messages(
                    task.channel_id, after_seq=ctx.last_seq, latest=TRANSCRIPT_WINDOW
                )
            message = await self.channels.append(
                tx,
                task.channel_id,
                sender_id=trace.member,
                sender_kind="agent",
                content=reply.content,
                trigger_id=task.trigger_id,
                task_id=task.id,
                round=trace.round,
                metadata={
                    "invocation_id": trace.invocation_id,
                    "model_route": redact_text(result.model_route),
                },
                seq=seq,
            )
            self._insert_invocation(tx, trace, "accepted", None, result, message.id, t2)
            # The task's counters are written at each round and at the end, not per reply: the
            # invocation records are the per-call truth, and a turn stays one small commit.
            return TurnOutcome(kind="accepted", voted=reply.voted_done, message=message), missed

        outcome, missed = await self.ctx.store.write(job, eager=True)
        task.calls += 1
        if outcome.kind == "accepted":
            task.accepted += 1
            assert outcome.message is not None
            for message in missed:
                ctx.add(message)
            ctx.add(outcome.message)
        return outcome

    async def _record(
        self,
        trace: _TraceBase,
        outcome: InvocationOutcome,
        reason: str | None,
        result: TurnResult | None,
        t2: float,
        *,
        stopped: bool = False,
    ) -> tuple[str | None, EndReason | None]:
        """Record a call that posted nothing (silent, rejected before commit, failed); return
        its reason code and, for a call its cancel signal ``stopped``, how the task ends. Why a
        call was stopped is read in the same transaction: a cancelled tree stops many turns at
        once, and a read transaction each would queue them behind the store's few readers."""
        task = trace.task

        async def job(tx: Tx) -> tuple[str | None, EndReason | None]:
            code, end = await self._stop_reason(task, tx) if stopped else (reason, None)
            self._insert_invocation(tx, trace, outcome, code, result, None, t2)
            await tx.update("tasks", task.id, calls=task.calls + 1)
            return code, end

        recorded = await self.ctx.store.write(job, eager=True)
        task.calls += 1
        return recorded

    def _insert_invocation(
        self,
        tx: Tx,
        trace: _TraceBase,
        outcome: InvocationOutcome,
        reason: str | None,
        result: TurnResult | None,
        message_id: str | None,
        t2: float,
    ) -> None:
        """The trace record of one call (C13), written in the same transaction as its effect."""
        t3 = self.ctx.clock.monotonic()
        timings = {
            "queue_ms": max(0.0, (trace.t0 - trace.ready_at) * 1000),
            "prompt_build_ms": (trace.t1 - trace.t0) * 1000,
            "provider_wait_ms": (t2 - trace.t1) * 1000,
            "persist_ms": (t3 - t2) * 1000,
        }
        if result is not None:
            timings.update({f"runtime_{k}": v for k, v in result.timings.items()})
        timings.update(trace.facts)
        tx.after_commit(
            lambda: self.ctx.metrics.turn_recorded(
                outcome, reason, timings, result.model_route if result else trace.route
            )
        )
        window = trace.window
        tx.insert(
            "invocations",
            Invocation(
                id=trace.invocation_id,
                task_id=trace.task.id,
                channel_id=trace.task.channel_id,
                trigger_id=trace.task.trigger_id,
                round=trace.round,
                agent_id=trace.member,
                prompt_first_id=window[0].id if window else None,
                prompt_last_id=window[-1].id if window else None,
                prompt_chars=trace.prompt_chars,
                model_route=redact_text(result.model_route) if result else trace.route,
                outcome=outcome,
                reason=reason,
                message_id=message_id,
                timings=timings,
                created=self.ctx.clock.now(),
            ),
        )

    async def _finish(
        self, task: Task, end: str, failed_member: str | None, error: str | None
    ) -> None:
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> Task | None:
            # Lock the channel row before the task row, in the same order as a trigger and a
            # reply commit take them; the reverse order deadlocks against a concurrent post on
            # PostgreSQL, and a lost finish would leave the task "running" for ever.
            channel = await tx.get_channel(task.channel_id, for_update=True)
            row: Task | None = await tx.get("tasks", task.id, for_update=True)
            if row is None or row.status != "running":
                # Another hub took the task over (this hub lost its lease) and ended it.
                return None
            await tx.update(
                "tasks",
                task.id,
                status="finished",
                end_reason=end,
                failed_member=failed_member,
                error=error,
                finished=now,
                current_round=task.current_round,
                calls=task.calls,
                accepted=task.accepted,
            )
            done = task.model_copy(
                update={
                    "status": "finished",
                    "end_reason": end,
                    "failed_member": failed_member,
                    "error": error,
                    "finished": now,
                }
            )
            if end == "interrupted" and channel is not None and channel.status == "active":
                # Say so where people look: the channel, not only the task record (Q4).
                await self.channels.post_as_system(
                    tx, task.channel_id, d.interrupted("the hub stopped while it ran")
                )
            reminder = d.reminder_after(end, task.rounds) if task.mode == "discussion" else None
            if reminder is not None and channel is not None and channel.status == "active":
                # The discussion stays open: remind the initiator how to finish (C6).
                await self.channels.post_as_moderator(tx, task.channel_id, reminder)
            self.ctx.events.record(
                tx,
                "task.finished",
                actor="system",
                subject=f"task:{task.id}",
                payload={
                    "end_reason": end,
                    "failed_member": failed_member,
                    "error": error,
                    "calls": task.calls,
                    "accepted": task.accepted,
                    "rounds_run": task.current_round,
                },
                trace_id=task.id,
            )
            self._publish_task(tx, done)
            return done

        done = await self.ctx.store.write(job)
        if done is None:
            return
        for callback in self.on_finished:
            with contextlib.suppress(Exception):
                await callback(done)

    # -- control and queries ----------------------------------------------------------------------
    async def cancel(self, caller: Principal, task_id: str) -> Task:
        """Cancel a running task (C14 DELETE /v1/tasks/{id}); replies not yet committed are
        rejected with reason ``cancelled``."""
        task = await self.get(caller, task_id)
        if task.status != "running":
            return task

        async def job(tx: Tx) -> None:
            await tx.update("tasks", task_id, cancel_requested=True)
            self.ctx.events.record(
                tx, "task.cancel_requested", actor=caller.id, subject=f"task:{task_id}"
            )

        await self.ctx.store.write(job)
        live = self.live.get(task_id)
        if live is not None:
            live.cancel.set()
            if live.runner is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(live.runner)
        return await self.get(caller, task_id)

    async def get(self, caller: Principal, task_id: str) -> Task:
        async with self.ctx.store.read() as tx:
            task: Task | None = await tx.get("tasks", task_id)
        if task is None:
            raise NotFound(f"no task {task_id!r}", code="task_not_found")
        await self.channels.get(caller, task.channel_id, include_deleted=True)
        return task

    async def of_channel(
        self, caller: Principal, channel_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[Task]:
        """The rows of ``of_channel_page``."""
        return (await self.of_channel_page(caller, channel_id, after=after, limit=limit)).rows

    async def of_channel_page(
        self, caller: Principal, channel_id: str, *, after: str | None = None, limit: int = 100
    ) -> Page[Task]:
        """A channel's tasks in order after the task ``after``: at most ``limit``, and no more
        once they hold the hub's page budget in bytes."""
        if after is not None:
            check_text(after, "after")
        await self.channels.get(caller, channel_id)
        async with self.ctx.store.read() as tx:
            t = tx.table("tasks").c
            where = [t.channel_id == channel_id]
            if after is not None:
                where.append(t.id > after)
            return await tx.page(
                "tasks", *where, key="id", limit=limit, max_bytes=self.ctx.settings.page_max_bytes
            )

    async def latest_of_channel(self, caller: Principal, channel_id: str, n: int) -> list[Task]:
        """A channel's ``n`` newest tasks, newest first."""
        await self.channels.get(caller, channel_id)
        async with self.ctx.store.read() as tx:
            t = tx.table("tasks").c
            return await tx.select(
                "tasks", t.channel_id == channel_id, order_by=[t.id.desc()], limit=n
            )

    async def invocations(self, caller: Principal, task_id: str) -> list[Invocation]:
        await self.get(caller, task_id)
        async with self.ctx.store.read() as tx:
            i = tx.table("invocations").c
            return await tx.select("invocations", i.task_id == task_id, order_by=[i.id])

    async def wait_idle(self) -> None:
        """Wait until no task of this hub is running (tests, demo, shutdown)."""
        await runners.wait_all(self.live)

    async def recover(self) -> list[Task]:
        """End the tasks of hubs that are gone or whose lease ran out: on start, and on every
        lease sweep when several hubs share the store (Q4, P2, task_recovery)."""
        return await task_recovery.recover(self)

    async def renew_leases(self) -> None:
        """Extend this hub's hold on its running tasks; stop driving any it no longer holds
        (another hub took it over while this one was paused or cut off from the store)."""
        until = self.ctx.clock.now() + timedelta(seconds=self.ctx.settings.lease_s)

        # Only tasks launched before the renewal: a task is launched once its row committed.
        driving = list(self.live.items())

        async def job(tx: Tx) -> list[str]:
            return await tx.renew_task_leases(self.hub_id, until)

        held = set(await self.ctx.store.write(job))
        for task_id, live in driving:
            if task_id not in held:
                live.cancel.set()

    async def stop(self) -> None:
        await runners.cancel_all(self.live)


@dataclass
class _TraceBase:
    invocation_id: str
    task: Task
    member: str
    round: int
    window: list[ChannelMessage]
    prompt_chars: int
    t0: float
    t1: float
    ready_at: float
    route: str = ""
    # The numbers a failed call reported (exit status, interrupt time), for its invocation row.
    facts: dict[str, float] = field(default_factory=dict)


def _failure_facts(failure: RuntimeFailure) -> dict[str, float]:
    """A failed call's timings, a command's exit status, how long an interrupt took and whether
    a stale session was dropped, named like a success's runtime timings."""
    facts: dict[str, Any] = {**(failure.details.get("timings") or {}), **failure.details}
    return {
        f"runtime_{key}": float(facts[key])
        for key in ("provider_wait_ms", "exit_code", "interrupt_ms", "resumed_fresh")
        if isinstance(facts.get(key), int | float)
    }


@dataclass
class _Context:
    """What a running task knows about its channel. The transcript is kept incrementally (only
    messages after the last one seen are read, in transactions the task makes anyway) and each
    message is rendered once, which keeps a turn's cost flat as the channel grows."""

    channel: Channel
    trigger: ChannelMessage
    messages: list[ChannelMessage]
    names: dict[str, str]
    task_text: str
    sessions: dict[str, Any] = field(default_factory=dict)
    # The transcript entry of each message, in step with ``messages``: a message is rendered
    # once, not once per prompt, and the window's size is kept as entries arrive.
    rendered: d.RunningWindow = field(default_factory=d.RunningWindow)

    def __post_init__(self) -> None:
        self.rendered = d.RunningWindow(d.transcript_entry(m, self.names) for m in self.messages)

    @property
    def last_seq(self) -> int:
        return self.messages[-1].seq if self.messages else 0

    def add(self, message: ChannelMessage) -> None:
        if not self.messages or message.seq > self.messages[-1].seq:
            self.messages.append(message)
            self.rendered.append(d.transcript_entry(message, self.names))
            if len(self.messages) > 2 * TRANSCRIPT_WINDOW:
                dropped = len(self.messages) - TRANSCRIPT_WINDOW
                del self.messages[:dropped]
                self.rendered.drop_oldest(dropped)

    def transcript(self) -> tuple[list[ChannelMessage], list[TranscriptEntry], int]:
        """The window of the next prompt (C5): the latest entries within the count and the
        character budget, and their size in the prompt (``RunningWindow.chars``)."""
        size = self.rendered.size()
        kept = len(self.messages) - size
        return self.messages[kept:], self.rendered.entries[kept:], self.rendered.chars(size)
