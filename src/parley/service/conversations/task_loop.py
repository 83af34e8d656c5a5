"""The loop that drives one discussion task: its rounds, each member's turn, the commit of a
reply at the linearisation point (C10), the trace of every call (C13) and the task's end.

:class:`~.tasks.TaskRunner` builds on it with what starts, supersedes, cancels and reports
tasks; this module is what runs between a task's start and its end. It is one sequence read
top to bottom (rounds, a turn, its commit, the task's end), which is why it stays one module at
about 600 lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from parley.core import discussion as d
from parley.core import workers as wk
from parley.core.channels import (
    TRANSCRIPT_WINDOW,
    Channel,
    ChannelMessage,
    EndReason,
    Invocation,
    InvocationOutcome,
    LogicalSession,
    Task,
)
from parley.core.errors import ParleyError, RuntimeFailure
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Runtime, Tx
from parley.core.redact import redact_text, scrub, secret_values
from parley.core.runtime import (
    NO_REPLY,
    AgentProfile,
    HubAccess,
    Prompt,
    ToolBox,
    TranscriptEntry,
    Turn,
    TurnInput,
    TurnResult,
    Usage,
)
from parley.core.usage import BudgetExhausted
from parley.service.context import ServiceContext
from parley.service.conversations.session_state import StateKeeper
from parley.service.conversations.task_hooks import TaskHooks
from parley.service.conversations.transcripts import Transcripts, channel_topic, check_content
from parley.service.identity import Identity
from parley.service.turn_access import TurnBinding

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
class LiveTask:
    """In-process state of a running task."""

    task: Task
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    # Monotonic time the next turn became due (launch, then the end of each turn): queue time.
    ready_at: float = 0.0
    # The member whose turn is in flight (a remote agent's pending turn included), or next
    # before the first turn starts: the one this task keeps "working", nobody else.
    speaking: str | None = None


ToolBoxFor = Callable[[Principal, str, str], ToolBox | None]
"""(agent, channel_id, session_id) -> the hub's tools for a turn of that agent (W9), if any."""


class TaskLoop:
    """Runs the tasks this hub launched, each in an asyncio task of its own."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        transcripts: Transcripts,
        hooks: TaskHooks,
        runtime_for: Callable[[Principal], Runtime | None],
        toolbox_for: ToolBoxFor,
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.transcripts = transcripts
        self.hooks = hooks
        self.runtime_for = runtime_for
        self.toolbox_for = toolbox_for
        self.live: dict[str, LiveTask] = {}
        # Runs that have left ``live`` and are recording their end (the commit, then the
        # finished hooks: a child's result, a meeting's next step): waiting for idle waits for
        # them too, or it could return before what a task's end sets off was stored.
        self.ending: set[asyncio.Task[Any]] = set()
        # Set when the hub stops: a task whose row commits after that is not started here (its
        # row says running, and recovery ends it as interrupted, as after any stop).
        self.stopping = False
        # Test seams for race tests: awaited right before the runtime is called and right
        # between the runtime's return and the commit of its reply (Turn) -> Awaitable[None].
        self.before_call: Callable[[Turn], Awaitable[None]] | None = None
        self.before_commit: Callable[[Turn], Awaitable[None]] | None = None
        # Awaited after a turn's runtime state is written: (logical session id, state).
        self.after_state_saved: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None

    def launch(self, task: Task) -> None:
        if self.stopping:
            log.info("task %s committed while the hub stops: not started", task.id)
            return
        first = task.members[0] if task.members else None
        live = LiveTask(task, ready_at=self.ctx.clock.monotonic(), speaking=first)
        self.live[task.id] = live
        live.runner = asyncio.create_task(self._run(live), name=f"parley-task-{task.id}")

    def _publish_task(self, tx: Tx, task: Task) -> None:
        data = {"type": "task", "task": task.model_dump(mode="json")}
        topic = channel_topic(task.channel_id)
        self.ctx.bus.publish_on_commit(tx, topic, data)

    # -- the loop ---------------------------------------------------------------------------------
    async def _run(self, live: LiveTask) -> None:
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
            runner = asyncio.current_task()
            if runner is not None:
                self.ending.add(runner)
            self.live.pop(task.id, None)
            try:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._finish(task, end or "failed", failed_member, error))
            finally:
                if runner is not None:
                    self.ending.discard(runner)

    async def _rounds(
        self, live: LiveTask, context: _Context
    ) -> tuple[str, str | None, str | None]:
        """Run the rounds; return (end reason, failed member, error)."""
        task = live.task
        for number in range(1, task.rounds + 1):
            tally = d.RoundTally(number)
            await self._set_round(task, number, context)
            for member in task.members:
                if live.cancel.is_set():
                    return (await self._stop_reason(task))[1], None, None
                live.speaking = member
                try:
                    outcome = await self._turn(live, context, member, number)
                finally:
                    live.speaking = None
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

    async def _turn(self, live: LiveTask, ctx: _Context, member: str, number: int) -> TurnOutcome:
        task = live.task
        clock = self.ctx.clock
        t0 = clock.monotonic()
        agent = await self.identity.require(member)
        session: LogicalSession | None = ctx.sessions.get(member)
        if session is None:
            session = await self.ctx.store.write(
                lambda tx: self.transcripts.session(tx, agent, task.channel_id), eager=True
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
            worker_session=bool(ctx.channel.metadata.get("worker_session")),
        )
        invocation_id = new_ulid()
        runtime: Runtime | None = self.runtime_for(agent)
        refusal: BudgetExhausted | None = None
        if runtime is not None:
            try:
                # The hub's own work, before the clock starts on the provider.
                await self.ctx.usage.check(agent.id, task.channel_id, ctx.channel.kind)
            except BudgetExhausted as spent:
                refusal = spent
        t1 = clock.monotonic()
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
        trace.channel_kind = ctx.channel.kind
        trace.runtime_config = agent.runtime
        if refusal is not None:
            # A spent budget refuses the turn before the runtime is asked: the member is named
            # as failed, like any turn that could not be had.
            await self._record(trace, "failed", refusal.code, None, clock.monotonic())
            return TurnOutcome(kind="failed", reason=f"{refusal.code}: {refusal.message}")
        kept: LogicalSession = session
        state = StateKeeper(
            session.runtime_state,
            lambda new: self._save_runtime_state(ctx, kept, new),
        )
        with self._hub_access(agent, task.channel_id, session.id) as access:
            return await self._call(
                live, ctx, runtime, agent, session, prompt, trace, state, access, number
            )

    @contextlib.contextmanager
    def _hub_access(
        self, agent: Principal, channel_id: str, session_id: str
    ) -> Iterator[HubAccess | None]:
        """A command-line agent's way back to the hub for the turn: the MCP endpoint and a
        token bound to this turn, ended with it (:mod:`parley.service.turn_access`)."""
        access = self.identity.turn_access
        if agent.runtime_kind != "command" or access.mcp_url is None:
            yield None
            return
        with access.open(TurnBinding(agent.id, channel_id, session_id)) as token:
            yield HubAccess(mcp_url=access.mcp_url, token=token)

    async def _call(
        self,
        live: LiveTask,
        ctx: _Context,
        runtime: Runtime,
        agent: Principal,
        session: LogicalSession,
        prompt: Prompt,
        trace: _TraceBase,
        state: StateKeeper,
        access: HubAccess | None,
        number: int,
    ) -> TurnOutcome:
        task = live.task
        clock = self.ctx.clock
        tools = trace.tools = self.toolbox_for(agent, task.channel_id, session.id)
        turn = Turn(
            invocation_id=trace.invocation_id,
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
            tools=tools,
            state_sink=state.report,
            hub=access,
            # A command agent's CLI may take input while its turn runs (Claude Code does).
            live_input=TurnInput() if agent.runtime_kind == "command" else None,
        )
        try:
            if self.before_call is not None:
                await self.before_call(turn)
            result: TurnResult | None = None
            beside = [asyncio.ensure_future(watch(turn)) for watch in self.hooks.running]
            try:
                result = await runtime.respond(turn)
            finally:
                await _stop_all(beside)
                # What the runtime reported is stored however the turn ended (a takeover, a
                # cancel, the hub stopping), before the next turn can read it; the result's
                # state has the last word.
                stored = state.settle(result.runtime_state if result is not None else None)
                if stored is not None:
                    await stored
            if self.before_commit is not None:
                await self.before_commit(turn)
        except RuntimeFailure as failure:
            t2 = clock.monotonic()
            # Members read the task's error and route: scrubbed here too, whatever the runtime.
            secrets = secret_values(agent.runtime)
            # A failed call still names the route it took (C13): which provider failed matters.
            trace.route = scrub(str(failure.details.get("model_route") or ""), secrets)
            trace.facts = _failure_facts(failure)
            trace.failure_usage = failure.usage
            if failure.reason == "cancelled":
                code, end = await self._record(trace, "rejected", None, None, t2, stopped=True)
                return TurnOutcome(kind="rejected", reason=code, end=end)
            await self._record(trace, "failed", failure.code, None, t2)
            message = scrub(failure.message, secrets)
            return TurnOutcome(kind="failed", reason=f"{failure.code}: {message}")
        t2 = clock.monotonic()
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
        logical session, so the next turn resumes it (W1 RuntimeSubSession). The one write of
        it, made by the turn's :class:`StateKeeper` for each new value reported."""

        async def job(tx: Tx) -> None:
            await tx.update("sessions", session.id, runtime_state=state)

        await self.ctx.store.write(job)
        ctx.sessions[session.agent_id] = session.model_copy(update={"runtime_state": state})
        if self.after_state_saved is not None:
            await self.after_state_saved(session.id, state)

    async def _append_reply(
        self,
        live: LiveTask,
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
                await self._book_usage(tx, trace, result)
                outcome = TurnOutcome(kind="rejected", reason=reason, end=end)
                return outcome, []
            missed: list[ChannelMessage] = []
            if seq != ctx.last_seq + 1:
                # Something else landed in the channel since this task last looked; read it in
                # this transaction so that the next speaker's transcript has no hole.
                missed = await tx.channel_messages(
                    task.channel_id, after_seq=ctx.last_seq, latest=TRANSCRIPT_WINDOW
                )
            message = await self.transcripts.append(
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
            await self._book_usage(tx, trace, result)
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
            await self._book_usage(tx, trace, result)
            await tx.update("tasks", task.id, calls=task.calls + 1)
            return code, end

        recorded = await self.ctx.store.write(job, eager=True)
        task.calls += 1
        return recorded

    async def _book_usage(self, tx: Tx, trace: _TraceBase, result: TurnResult | None) -> None:
        """Record what the call used, in the transaction that records the call: a failed or
        stopped call's too, when its runtime said what it used."""
        usage = result.usage if result is not None else trace.failure_usage
        if usage is None:
            return
        await self.ctx.usage.record(
            tx,
            call_id=trace.invocation_id,
            agent_id=trace.member,
            usage=usage,
            runtime=trace.runtime_config,
            route=result.model_route if result is not None else trace.route,
            channel_id=trace.task.channel_id,
            channel_kind=trace.channel_kind,
            task_id=trace.task.id,
        )

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
        spent = getattr(trace.tools, "spent_ms", None)
        if isinstance(spent, float) and spent > 0:
            # Part of the provider wait: the hub ran the model's tool calls meanwhile.
            timings["tool_calls_ms"] = spent
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
                reason = "the hub stopped while it ran"
                note = (
                    wk.turn_interrupted(reason) if channel.kind == "work" else d.interrupted(reason)
                )
                await self.transcripts.post_as_system(tx, task.channel_id, note)
            reminder = d.reminder_after(end, task.rounds) if task.mode == "discussion" else None
            if reminder is not None and channel is not None and channel.status == "active":
                # The discussion stays open: remind the initiator how to finish (C6).
                await self.transcripts.post_as_moderator(tx, task.channel_id, reminder)
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
        await self.hooks.finished(done)


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
    tools: ToolBox | None = None
    # The numbers a failed call reported (exit status, interrupt time), for its invocation row.
    facts: dict[str, float] = field(default_factory=dict)
    # Where the call's usage is booked: the channel's kind and the agent's runtime config.
    channel_kind: str = ""
    runtime_config: dict[str, Any] = field(default_factory=dict)
    # What a call that failed (or was stopped) used before it ended, when its runtime knows.
    failure_usage: Usage | None = None


async def _stop_all(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel what ran beside a turn and wait for it; its failure is logged, never the turn's."""
    for task in tasks:
        task.cancel()
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, Exception):
            log.warning("work beside a turn failed: %r", outcome)


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
