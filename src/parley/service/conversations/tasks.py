"""Discussion tasks (C5–C7, C10–C13): starting, superseding, cancelling and reporting them;
the loop that gives members their turns is :mod:`.task_loop`.

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
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from parley.core import discussion as d
from parley.core.channels import (
    Channel,
    ChannelMessage,
    Invocation,
    SenderKind,
    Task,
    TaskMode,
    refuse_meeting_channel,
)
from parley.core.errors import NotFound, PermissionDenied
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.limits import check_text
from parley.core.ports import Page, Runtime, Tx
from parley.service.context import ServiceContext
from parley.service.conversations import recovery, runners
from parley.service.conversations.task_hooks import TaskHooks
from parley.service.conversations.task_loop import TaskLoop, ToolBoxFor
from parley.service.conversations.transcripts import Posted, Transcripts
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail


class TaskRunner(TaskLoop):
    """Starts, drives (:class:`~.task_loop.TaskLoop`), supersedes, cancels and reports
    discussion tasks. What other capabilities do at a task's start, end or takeover they
    subscribe to ``hooks``."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        transcripts: Transcripts,
        mail: Mail,
        *,
        hooks: TaskHooks,
        runtime_for: Callable[[Principal], Runtime | None],
        toolbox_for: ToolBoxFor,
        hub_id: str,
    ) -> None:
        super().__init__(ctx, identity, transcripts, hooks, runtime_for, toolbox_for)
        self.mail = mail
        self.hub_id = hub_id

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
            message = await self.transcripts.append(
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
                await self.transcripts.post_as_moderator(tx, channel_id, d.CHANNEL_CLOSED)
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
            if not agent.takes_turns:
                continue  # disabled or archived: what it was sent waits for it
            if agent.runtime_kind == "none":
                if channel.kind == "work":
                    await self._notify_idle_agent(tx, agent, trigger)
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
        await self.hooks.started(tx, channel, task)
        self._publish_task(tx, task)
        tx.after_commit(lambda: self.launch(task))
        return task

    async def _notify_idle_agent(self, tx: Tx, agent: Principal, message: ChannelMessage) -> None:
        """An agent without a runtime is not woken by a turn; it finds the work-channel message
        in its inbox (and any live wait_for_mail wakes)."""
        await self.mail.deliver_system(
            tx,
            agent.id,
            "notice",
            f"New message in your work channel from {message.sender_id}",
            message.content,
            {"channel_id": message.channel_id, "message_id": message.id},
        )

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
        await self.transcripts.get(caller, task.channel_id, include_deleted=True)
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
        await self.transcripts.get(caller, channel_id)
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
        await self.transcripts.get(caller, channel_id)
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

    def in_flight(self, agent_id: str) -> bool:
        """Whether this hub has a turn of the agent in flight (a remote agent's pending turn is
        driven by a task too), or about to start as its task's first: what "working" means for
        a room member. Not any running task of a channel it belongs to: a member whose turn in
        a group is over, or not yet due, is not working."""
        return any(live.speaking == agent_id for live in self.live.values())

    async def wait_idle(self) -> None:
        """Wait until no task of this hub is running or still recording its end (tests, demo,
        shutdown)."""
        me = asyncio.current_task()
        while True:
            await runners.wait_all(self.live)
            ending = [runner for runner in self.ending if runner is not me]
            if not ending and not self.live:
                return
            await asyncio.gather(*ending, return_exceptions=True)

    async def recover(self) -> list[Task]:
        """End the tasks of hubs that are gone or whose lease ran out: on start, and on every
        lease sweep when several hubs share the store (Q4, P2, :mod:`.recovery`)."""
        return await recovery.recover(self.ctx, self.transcripts, self.hooks, self.hub_id)

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
        self.stopping = True
        await runners.cancel_all(self.live)
