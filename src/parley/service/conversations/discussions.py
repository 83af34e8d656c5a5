"""Discussion channels (C3, C4, C8, C9, C15): a private channel opened by a working agent, driven
by the template moderator, finished only by the initiator's callback with a summary file, which
wakes the session that asked.

Origin, initiator and workspace always come from the metadata recorded at creation, never from
the caller of the callback: an agent cannot redirect a result to another channel or claim to be
the initiator.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from parley.core import discussion as d
from parley.core.channels import Channel, LogicalSession, Task, refuse_meeting_channel
from parley.core.clock import iso
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.limits import check_length, check_text
from parley.core.ports import Tx
from parley.core.runtime import NO_REPLY
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.conversations.tasks import TaskRunner
from parley.service.identity import Identity, require_operator
from parley.service.mail.mailbox import Mail


class Discussions:
    """Opens, finishes and closes discussion channels."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        channels: Channels,
        runner: TaskRunner,
        mail: Mail,
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.channels = channels
        self.runner = runner
        self.mail = mail
        runner.hooks.on_finished(self.remind_initiator)

    async def tell_initiator(
        self, tx: Tx, channel: Channel, subject: str, body: str, **payload: Any
    ) -> None:
        """Put a moderator reminder in the initiator's inbox too: an agent connected over MCP
        waits on wait_for_mail rather than reading the channel, and must learn to finish."""
        initiator = channel.metadata.get("initiatorAgentId")
        if not initiator:
            return
        await self.mail.deliver_system(
            tx,
            initiator,
            "notice",
            subject,
            body,
            {"channel_id": channel.id, "next": "discuss_callback", **payload},
        )

    async def remind_initiator(self, task: Task) -> None:
        """When a discussion's rounds end and it is still open, the initiator also finds the
        moderator's reminder in its inbox: an agent connected over MCP is waiting on
        wait_for_mail, not reading the channel, and must learn that it should now finish."""
        reminder = d.reminder_after(task.end_reason or "", task.rounds)
        if task.mode != "discussion" or reminder is None:
            return

        async def job(tx: Tx) -> None:
            channel = await tx.get_channel(task.channel_id)
            if channel is None or channel.status != "active":
                return
            await self.tell_initiator(
                tx,
                channel,
                f"Discussion {channel.name!r}: rounds ended ({task.end_reason}); write the "
                "summary and call discuss_callback",
                reminder,
                end_reason=task.end_reason,
            )

        await self.ctx.store.write(job)

    async def create_private_channel(
        self,
        caller: Principal,
        name: str,
        members: list[str],
        callback_channel_id: str | None = None,
        discuss_guide: str | None = None,
    ) -> Channel:
        """C3: without ``callback_channel_id`` a plain private group channel; with it a
        discussion channel whose kickoff starts the rounds."""
        d.check_private_channel_args(callback_channel_id, discuss_guide)
        if not name.strip():
            raise InvalidRequest("channel name is empty", code="invalid_name")
        check_text(name, "channel name")
        if discuss_guide is not None:
            check_text(discuss_guide, "discussGuide")
        if callback_channel_id is None:
            from parley.service.conversations.channels import ChannelSpec

            return await self.channels.create(
                caller, ChannelSpec(name=name, kind="group", members=members, private=True)
            )
        if caller.kind != "agent":
            raise PermissionDenied(
                "a discussion is opened by a working agent from its session; humans create "
                "group channels instead",
                code="initiator_must_be_agent",
            )

        async def job(tx: Tx) -> Channel:
            await self.channels.check_limit(tx, caller)
            origin = await tx.get_channel(callback_channel_id)
            if origin is None or origin.status == "deleted":
                raise NotFound(
                    f"callbackChannelId {callback_channel_id!r} is not a channel",
                    code="callback_channel_not_found",
                )
            if caller.id not in origin.members:
                raise PermissionDenied(
                    f"{caller.id!r} is not in the callback channel {callback_channel_id!r}; a "
                    "discussion reports back to a channel of the agent that opens it",
                    code="callback_channel_forbidden",
                )
            # A result reported back there would post into the meeting and start turns.
            refuse_meeting_channel(origin, "be a discussion's callback channel")
            session = await self.channels.session(tx, caller, origin.id)
            all_members = await self.channels._check_members(tx, [caller.id, *members])
            await self.channels.check_consent(tx, caller, all_members)
            await self.channels.check_name_free(tx, name)
            now = self.ctx.clock.now()
            channel_id = new_ulid()
            metadata = {
                "mode": "discussion",
                "discussionChannelId": channel_id,
                "originChannelId": origin.id,
                "initiatorAgentId": caller.id,
                "initiatorSessionId": session.id,
                "discussGuide": discuss_guide,
                "status": "active",
                "createdAt": iso(now),
                "summaryPath": None,
                "completedAt": None,
            }
            channel = Channel(
                id=channel_id,
                name=name,
                kind="discussion",
                private=True,
                created_by=caller.id,
                created=now,
                discussion_rounds=origin.discussion_rounds if origin.kind != "work" else 3,
                turn_timeout_s=self.ctx.settings.turn_timeout_s,
                metadata=metadata,
                members=all_members,
            )
            self.channels._insert_channel(tx, channel, caller.id)
            await tx.flush()
            await tx.set_members(channel_id, all_members)
            kickoff = await self.channels.post_as_moderator(
                tx, channel_id, d.kickoff(discuss_guide or "", channel_id), trigger=True
            )
            await self.runner.start_task(tx, channel, kickoff)
            return channel

        return await self.ctx.store.write(job)

    async def callback(
        self,
        caller: Principal,
        channel_id: str,
        summary_path: str,
        *,
        session_id: str | None = None,
    ) -> Channel:
        """C8: only from the discussion channel, by its initiator's session, with a summary file
        that exists inside the initiator's workspace, once. Each refusal has its own code.

        ``session_id`` is the session the call comes from (the turn's session, or the one a REST
        caller names); None means the caller's session in the discussion channel itself."""

        async def job(tx: Tx) -> Channel:
            channel = await tx.get_channel(channel_id, for_update=True)
            if channel is None or channel.status == "deleted":
                raise NotFound(f"no channel {channel_id!r}", code="channel_not_found")
            refuse_meeting_channel(channel, "be finished as a discussion")
            meta = dict(channel.metadata)
            if channel.kind != "discussion" or meta.get("mode") != "discussion":
                raise InvalidRequest(
                    f"channel {channel_id!r} is not a discussion channel; discuss_callback only "
                    "finishes discussions opened with callbackChannelId",
                    code="not_discussion_channel",
                )
            if caller.id != meta.get("initiatorAgentId"):
                raise PermissionDenied(
                    f"only the initiator {meta.get('initiatorAgentId')!r} may finish this "
                    f"discussion; {caller.id!r} is a participant",
                    code="not_initiator",
                )
            await self._check_session(tx, caller, channel, session_id)
            if meta.get("status") != "active":
                raise Conflict(
                    f"discussion {channel_id!r} is already {meta.get('status')!r}; a "
                    "discussion is finished once",
                    code="already_completed",
                )
            initiator = await self.identity.require(caller.id, tx)
            if not initiator.workspace:
                raise InvalidRequest(
                    f"{caller.id!r} has no workspace directory; the operator must set one "
                    "before it can hand in a summary",
                    code="no_workspace",
                )
            resolved = self.ctx.workspace.resolve_inside(initiator.workspace, summary_path)
            now = self.ctx.clock.now()
            # Source 000 §11: active -> completed (the callback succeeded) -> closed (kept for
            # the record). Both states are recorded with their time, in this order.
            meta.update(
                {"summaryPath": str(resolved), "status": "completed", "completedAt": iso(now)}
            )
            self.ctx.events.record(
                tx,
                "discussion.completed",
                actor=caller.id,
                subject=f"channel:{channel_id}",
                payload={
                    "summaryPath": str(resolved),
                    "origin": meta["originChannelId"],
                    "completedAt": meta["completedAt"],
                },
            )
            meta.update({"status": "closed", "closedAt": iso(self.ctx.clock.now())})
            await tx.update("channels", channel_id, metadata=meta, status="closed")
            await self._silence_sessions(tx, channel)
            await self.runner.supersede_running(tx, channel_id)
            self.ctx.events.record(
                tx,
                "discussion.closed",
                actor=caller.id,
                subject=f"channel:{channel_id}",
                payload={"closedAt": meta["closedAt"], "after": "completed"},
            )
            # C9: the result-ready message in the origin channel wakes the origin session.
            origin = await tx.get_channel(meta["originChannelId"], for_update=True)
            if origin is not None and origin.status == "active":
                ready = await self.channels.post_as_moderator(
                    tx,
                    origin.id,
                    d.result_ready(str(resolved), channel_id),
                    trigger=True,
                    metadata={"discussionChannelId": channel_id, "summaryPath": str(resolved)},
                )
                await self.runner.start_task(tx, origin, ready)
            return channel.model_copy(update={"metadata": meta, "status": "closed"})

        return await self.ctx.store.write(job)

    async def _check_session(
        self, tx: Tx, caller: Principal, channel: Channel, session_id: str | None
    ) -> None:
        """Only the initiator's session may finish (source 000 §8.2): the one the discussion was
        opened from (``initiatorSessionId``, in the origin channel) or its continuation in the
        discussion channel; another conversation of the same agent may not."""
        if session_id is None:
            return  # the call names the discussion channel: it comes from there
        session: LogicalSession | None = await tx.get("sessions", session_id)
        if session is None or session.agent_id != caller.id:
            raise NotFound(f"{caller.id!r} has no session {session_id!r}", code="session_not_found")
        meta = channel.metadata
        if session.id == meta.get("initiatorSessionId") or session.channel_id == channel.id:
            return
        raise PermissionDenied(
            f"discussion {channel.id!r} was opened by session "
            f"{meta.get('initiatorSessionId')!r} of {caller.id!r} in channel "
            f"{meta.get('originChannelId')!r}; this call comes from its session {session.id!r} "
            f"in channel {session.channel_id!r}. Call discuss_callback from your turn in the "
            "discussion channel or in the channel you opened it from",
            code="not_initiator_session",
        )

    async def session_in(self, caller: Principal, channel_id: str) -> str | None:
        """The id of the caller's session in a channel, if it has one (the session a call made
        during a turn in that channel comes from)."""
        async with self.ctx.store.read() as tx:
            session = await tx.session_for(caller.id, channel_id)
        return session.id if session is not None else None

    async def _silence_sessions(self, tx: Tx, channel: Channel) -> None:
        """Override every member's session in this channel to NO_REPLY — a per-session override,
        never the agent's global model (source 000 §7.3)."""
        for member in channel.members:
            agent = await self.identity.get(member, tx)
            if agent is None or agent.kind != "agent":
                continue
            session = await self.channels.session(tx, agent, channel.id)
            await tx.update("sessions", session.id, model_override=NO_REPLY)
            self.ctx.events.record(
                tx,
                "session.override",
                actor="system",
                subject=f"session:{session.id}",
                payload={"model_override": NO_REPLY, "channel_id": channel.id},
            )

    async def force_close(self, caller: Principal, channel_id: str, reason: str) -> Channel:
        """C15: the operator closes a discussion that will not finish; the origin is told."""
        require_operator(caller, "force-close a discussion")
        if not reason.strip():
            raise InvalidRequest("give a reason for closing", code="reason_required")
        check_text(reason, "reason")
        check_length(reason, "the reason", d.CLOSE_REASON_MAX_CHARS)

        async def job(tx: Tx) -> Channel:
            channel = await tx.get_channel(channel_id, for_update=True)
            if channel is None or channel.status == "deleted":
                raise NotFound(f"no channel {channel_id!r}", code="channel_not_found")
            refuse_meeting_channel(channel, "be closed as a discussion")
            if channel.status != "active":
                raise Conflict(f"channel {channel_id!r} is already closed", code="already_closed")
            meta = dict(channel.metadata)
            now = self.ctx.clock.now()
            if meta.get("mode") == "discussion":
                meta.update({"status": "closed", "closedReason": reason, "closedAt": iso(now)})
            await tx.update("channels", channel_id, metadata=meta, status="closed")
            await self._silence_sessions(tx, channel)
            await self.runner.supersede_running(tx, channel_id)
            await self.channels.post_as_moderator(tx, channel_id, d.CHANNEL_CLOSED)
            self.ctx.events.record(
                tx,
                "discussion.force_closed",
                actor=caller.id,
                subject=f"channel:{channel_id}",
                payload={"reason": reason},
            )
            origin_id = meta.get("originChannelId")
            origin = await tx.get_channel(origin_id, for_update=True) if origin_id else None
            if origin is not None and origin.status == "active":
                note = await self.channels.post_as_moderator(
                    tx, origin.id, d.force_closed(channel_id, reason), trigger=True
                )
                await self.runner.start_task(tx, origin, note)
            return channel.model_copy(update={"metadata": meta, "status": "closed"})

        return await self.ctx.store.write(job)

    async def remind_stale(self) -> list[str]:
        """C15: remind the initiator of every active discussion idle past the configured time
        (once per idle period)."""
        now = self.ctx.clock.now()
        stale_s = self.ctx.settings.discussion_stale_s

        async def job(tx: Tx) -> list[str]:
            c = tx.table("channels").c
            rows = await tx.select("channels", c.kind == "discussion", c.status == "active")
            reminded = []
            for channel in rows:
                last = channel_last_activity(channel)
                if last is None or (now - last).total_seconds() < stale_s:
                    continue
                if any(lv.task.channel_id == channel.id for lv in self.runner.live.values()):
                    continue
                minutes = int((now - last).total_seconds() // 60)
                reminder = d.stale_reminder(minutes)
                await self.channels.post_as_moderator(tx, channel.id, reminder)
                await self.tell_initiator(
                    tx,
                    channel,
                    f"Discussion {channel.name!r} has been idle for {minutes} minutes; write the "
                    "summary and call discuss_callback",
                    reminder,
                    idle_minutes=minutes,
                )
                self.ctx.events.record(
                    tx, "discussion.stale_reminder", actor="system", subject=f"channel:{channel.id}"
                )
                reminded.append(channel.id)
            return reminded

        return await self.ctx.store.write(job)


def channel_last_activity(channel: Channel) -> datetime:
    return channel.last_activity or channel.created
