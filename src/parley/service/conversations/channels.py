"""Channels (C1, C2): creation, membership, visibility and posting. Every message is persisted
before it is published, and the sender is always the caller the server authenticated."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from parley.core import consent
from parley.core import discussion as d
from parley.core.channels import (
    CREATED_KINDS,
    Channel,
    ChannelMessage,
    LogicalSession,
    SenderKind,
    refuse_meeting_channel,
)
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import MODERATOR_ID, SYSTEM_ID, Principal
from parley.core.ids import new_id, new_ulid
from parley.core.limits import StorableText, check_seq, check_size, check_text
from parley.core.ports import Page, Tx
from parley.service.context import ServiceContext
from parley.service.identity import Identity

if TYPE_CHECKING:
    from parley.service.conversations.tasks import TaskRunner


def check_content(content: str, what: str, limit: int) -> int:
    """Refuse text no channel message may hold: over the hub's message limit (``limit`` bytes)
    or unstorable; return its size. A post, an answer to a turn and a runtime's reply all
    become channel messages, so all pass here."""
    size = check_size(
        len(content.encode("utf-8", "surrogatepass")), limit, what, code="message_too_large"
    )
    check_text(content, what)
    return size


def channel_topic(channel_id: str) -> str:
    return f"channel:{channel_id}"


ACCESS_CHANGED = "access"
"""The bus item (on the channel's topic) that says who may read the channel changed: members
were removed or the channel was deleted. Whatever follows the channel for a reader (an event
stream, a live page) asks again whether that reader may still read it, and ends if not."""


class ChannelSpec(BaseModel):
    """A new group or direct channel."""

    name: StorableText = Field(min_length=1, max_length=200)
    kind: Literal["group", "direct"] = "group"
    members: list[StorableText] = Field(default_factory=list, max_length=200)
    discussion_rounds: int = Field(default=3)
    private: bool = False
    turn_timeout_s: float | None = Field(default=None, gt=0, le=86400)
    missed_turn_policy: Literal["fail", "no_reply"] = "fail"


class ChannelPatch(BaseModel):
    members: list[StorableText] | None = Field(default=None, max_length=200)
    discussion_rounds: int | None = None


class Posted(BaseModel):
    """A posted message and the task it started, if any."""

    message: ChannelMessage
    task_id: str | None = None


class Channels:
    """The channel service."""

    def __init__(self, ctx: ServiceContext, identity: Identity) -> None:
        self.ctx = ctx
        self.identity = identity
        self.runner: TaskRunner | None = None  # set by the hub (tasks need channels and back)

    # -- visibility -------------------------------------------------------------------------------
    def can_see(self, caller: Principal, channel: Channel) -> bool:
        return (
            caller.is_operator
            or caller.id in channel.members
            or caller.id == channel.created_by
            or caller.id == channel.owner_agent_id
        )

    async def get(
        self,
        caller: Principal,
        channel_id: str,
        tx: Tx | None = None,
        *,
        include_deleted: bool = False,
    ) -> Channel:
        """A channel the caller may see; a deleted one only with ``include_deleted`` (its
        tasks and their traces stay readable for the record)."""
        if tx is None:
            async with self.ctx.store.read() as rtx:
                channel = await rtx.get_channel(channel_id)
        else:
            channel = await tx.get_channel(channel_id)
        if channel is None or (channel.status == "deleted" and not include_deleted):
            raise NotFound(f"no channel {channel_id!r}", code="channel_not_found")
        if not self.can_see(caller, channel):
            raise PermissionDenied(
                f"{caller.id!r} is not a member of channel {channel_id!r}",
                code="channel_forbidden",
            )
        return channel

    async def visible(
        self,
        caller: Principal,
        *,
        after: str | None = None,
        limit: int = 100,
        kinds: Sequence[str] | None = None,
    ) -> list[Channel]:
        """The rows of ``page``."""
        return (await self.page(caller, after=after, limit=limit, kinds=kinds)).rows

    async def page(
        self,
        caller: Principal,
        *,
        after: str | None = None,
        limit: int = 100,
        kinds: Sequence[str] | None = None,
    ) -> Page[Channel]:
        """Channels the caller is a member of or created (every one, for the operator), in id
        order after ``after``: at most ``limit``, and no more once they hold the hub's page
        budget in bytes."""
        if after is not None:
            check_text(after, "after")
        async with self.ctx.store.read() as tx:
            return await tx.channels_page(
                None if caller.is_operator else caller.id,
                after=after,
                kinds=kinds,
                limit=limit,
                max_bytes=self.ctx.settings.page_max_bytes,
            )

    async def visible_among(self, caller: Principal, channel_ids: Iterable[str]) -> set[str]:
        """Which of ``channel_ids`` name channels the caller may see (not deleted)."""
        wanted = set(channel_ids)
        seen: set[str] = set()
        if not wanted:
            return seen
        async with self.ctx.store.read() as tx:
            for channel_id in wanted:
                channel = await tx.get_channel(channel_id)
                if channel is None or channel.status == "deleted":
                    continue
                if self.can_see(caller, channel):
                    seen.add(channel_id)
        return seen

    async def _check_members(self, tx: Tx, members: list[str]) -> list[str]:
        members = d.snapshot_members(m.strip() for m in members)
        for member in members:
            found = await self.identity.get(member, tx)
            if found is None:
                raise NotFound(f"member {member!r} does not exist", code="member_not_found")
        return members

    async def check_consent(self, tx: Tx, adder: Principal, added: Iterable[str]) -> None:
        """Refuse to add agents that have not consented to ``adder`` (core/consent.py): a member
        gets turns, and a turn runs the agent's runtime at its owner's expense."""
        missing = []
        for member_id in added:
            # Read from the store, not the identity cache: another hub may have changed consent.
            member: Principal | None = await tx.get("principals", member_id)
            if member is not None and not consent.may_add(adder, member):
                missing.append(member_id)
        consent.refuse_unconsented(adder, missing)

    # -- creation ---------------------------------------------------------------------------------
    async def check_limit(self, tx: Tx, caller: Principal) -> None:
        """Refuse a channel more than the caller may keep open (``channels_per_principal``): its
        group, direct and discussion channels not deleted, closed or finished. The operator is
        not limited: it runs the hub and may delete anyone's channel."""
        limit = self.ctx.settings.channels_per_principal
        if caller.is_operator or limit == 0:
            return
        # The creator's row lock: two creations of one principal (on two connections, or two
        # hubs) must not both find room for one more.
        await tx.get("principals", caller.id, for_update=True)
        c = tx.table("channels").c
        open_ = await tx.count(
            "channels",
            c.created_by == caller.id,
            c.kind.in_(CREATED_KINDS),
            c.status == "active",
        )
        if open_ >= limit:
            raise Conflict(
                f"{caller.id!r} already has {open_} open channels it created, the most one "
                f"principal may have ({limit}); delete a group or direct channel you no longer "
                "use (DELETE /v1/channels/{id}) or finish a discussion, then try again",
                code="channel_limit_reached",
                limit=limit,
            )

    async def create(self, caller: Principal, spec: ChannelSpec) -> Channel:
        rounds = d.check_rounds(spec.discussion_rounds)
        if spec.kind == "direct" and len(set(spec.members) | {caller.id}) != 2:
            raise InvalidRequest(
                "a direct channel has exactly two members: you and one other",
                code="direct_needs_two",
            )

        async def job(tx: Tx) -> Channel:
            await self.check_limit(tx, caller)
            members = await self._check_members(tx, [caller.id, *spec.members])
            await self.check_consent(tx, caller, members)
            channel = Channel(
                id=new_ulid(),
                name=spec.name,
                kind=spec.kind,
                private=spec.private or spec.kind == "direct",
                created_by=caller.id,
                created=self.ctx.clock.now(),
                discussion_rounds=rounds,
                turn_timeout_s=spec.turn_timeout_s or self.ctx.settings.turn_timeout_s,
                missed_turn_policy=spec.missed_turn_policy,
                members=members,
            )
            self._insert_channel(tx, channel, caller.id)
            await tx.flush()
            await tx.set_members(channel.id, members)
            return channel

        return await self.ctx.store.write(job)

    def _insert_channel(self, tx: Tx, channel: Channel, actor: str) -> None:
        tx.insert("channels", channel)
        self.ctx.events.record(
            tx,
            "channel.created",
            actor=actor,
            subject=f"channel:{channel.id}",
            payload={"kind": channel.kind, "members": channel.members, "name": channel.name},
        )

    async def update(self, caller: Principal, channel_id: str, patch: ChannelPatch) -> Channel:
        """Change members or rounds; a running task keeps its snapshot (C12)."""

        async def job(tx: Tx) -> Channel:
            channel = await self.get(caller, channel_id, tx)
            refuse_meeting_channel(channel, "change its members or rounds")
            if not (caller.is_operator or caller.id == channel.created_by):
                raise PermissionDenied(
                    "only the channel's creator or the operator may change it",
                    code="channel_owner_only",
                )
            if channel.kind == "work":
                raise Conflict("a work channel's members cannot change", code="work_channel_fixed")
            values: dict[str, Any] = {}
            if patch.discussion_rounds is not None:
                values["discussion_rounds"] = d.check_rounds(patch.discussion_rounds)
                await tx.update("channels", channel_id, **values)
            if patch.members is not None:
                members = await self._check_members(tx, [channel.created_by, *patch.members])
                await self.check_consent(
                    tx, caller, [m for m in members if m not in channel.members]
                )
                await tx.set_members(channel_id, members)
                if set(channel.members) - set(members):
                    self._access_changed(tx, channel_id)
                channel.members = members
            self.ctx.events.record(
                tx,
                "channel.updated",
                actor=caller.id,
                subject=f"channel:{channel_id}",
                payload={**values, "members": channel.members},
            )
            return channel.model_copy(update=values)

        return await self.ctx.store.write(job)

    def _access_changed(self, tx: Tx, channel_id: str) -> None:
        self.ctx.bus.publish_on_commit(tx, channel_topic(channel_id), {"type": ACCESS_CHANGED})

    async def delete(self, caller: Principal, channel_id: str) -> Channel:
        """Delete a group or direct channel (source 003's room deletion), by its creator or the
        operator. Its messages are kept for the record and no longer listed; a running
        discussion ends ``deleted`` and a reply still on its way is refused ``room_deleted``."""
        assert self.runner is not None
        runner = self.runner

        async def job(tx: Tx) -> Channel:
            channel = await tx.get_channel(channel_id, for_update=True)
            if channel is None or channel.status == "deleted" or not self.can_see(caller, channel):
                raise NotFound(f"no channel {channel_id!r}", code="channel_not_found")
            refuse_meeting_channel(channel, "be deleted")
            if channel.kind not in ("group", "direct"):
                hint = {
                    "work": "an agent's work channel lives as long as the agent",
                    "discussion": "close a discussion instead (force-close, operator)",
                }.get(channel.kind, "it is not a group")
                raise Conflict(
                    f"channel {channel_id!r} is a {channel.kind} channel and cannot be deleted; "
                    f"{hint}",
                    code="channel_not_deletable",
                )
            if not (caller.is_operator or caller.id == channel.created_by):
                raise PermissionDenied(
                    f"only the channel's creator {channel.created_by!r} or the operator may "
                    f"delete channel {channel_id!r}",
                    code="channel_owner_only",
                )
            await tx.update("channels", channel_id, status="deleted")
            self._access_changed(tx, channel_id)
            # The running task's reply is then refused at its commit (the claim requires an
            # active channel); the flag stops the loop before its next speaker.
            stopped = await runner.supersede_running(tx, channel_id)
            self.ctx.events.record(
                tx,
                "channel.deleted",
                actor=caller.id,
                subject=f"channel:{channel_id}",
                payload={"kind": channel.kind, "tasks_stopped": stopped},
            )
            return channel.model_copy(update={"status": "deleted"})

        return await self.ctx.store.write(job)

    # -- sessions ---------------------------------------------------------------------------------
    async def session(self, tx: Tx, agent: Principal, channel_id: str) -> LogicalSession:
        """The agent's session in a channel, created on first use (W1)."""
        found = await tx.session_for(agent.id, channel_id)
        if found is not None:
            return found
        session = LogicalSession(
            id=new_id("vs-"),
            agent_id=agent.id,
            channel_id=channel_id,
            display_name=f"{agent.display_name} / {channel_id[-6:].lower()}",
            created=self.ctx.clock.now(),
        )
        tx.insert("sessions", session)
        await tx.flush()
        return session

    # -- messages ---------------------------------------------------------------------------------
    async def messages(
        self,
        caller: Principal,
        channel_id: str,
        *,
        after_seq: int | None = None,
        latest: int | None = None,
        limit: int = 500,
    ) -> list[ChannelMessage]:
        page = await self.messages_page(
            caller, channel_id, after_seq=after_seq, latest=latest, limit=limit
        )
        return page.rows

    async def messages_page(
        self,
        caller: Principal,
        channel_id: str,
        *,
        after_seq: int | None = None,
        latest: int | None = None,
        limit: int = 500,
    ) -> Page[ChannelMessage]:
        """Messages in channel order, at most ``limit`` (or the ``latest`` ones), and no more
        once they hold the hub's page budget in bytes."""
        check_seq(after_seq, "after_seq")
        await self.get(caller, channel_id)
        async with self.ctx.store.read() as tx:
            return await tx.channel_page(
                channel_id,
                after_seq=after_seq,
                latest=latest,
                limit=limit,
                max_bytes=self.ctx.settings.page_max_bytes,
            )

    async def append(
        self,
        tx: Tx,
        channel_id: str,
        *,
        sender_id: str,
        sender_kind: SenderKind,
        content: str,
        trigger: bool = False,
        reply_to: str | None = None,
        trigger_id: str | None = None,
        task_id: str | None = None,
        round: int | None = None,
        metadata: dict[str, Any] | None = None,
        seq: int | None = None,
    ) -> ChannelMessage:
        """Append a message inside ``tx`` and publish it after commit. A ``trigger`` message
        becomes the channel's latest trigger in the same row update (C10). ``seq`` is a position
        the caller already claimed in this transaction (``tx.claim_channel_seq``)."""
        message_id = new_ulid()
        now = self.ctx.clock.now()
        if seq is None:
            seq = await tx.next_channel_seq(
                channel_id, trigger_id=message_id if trigger else None, now=now
            )
        message = ChannelMessage(
            id=message_id,
            channel_id=channel_id,
            seq=seq,
            sender_id=sender_id,
            sender_kind=sender_kind,
            content=content,
            reply_to=reply_to,
            trigger_id=message_id if trigger else trigger_id,
            task_id=task_id,
            round=round,
            metadata=metadata or {},
            created=now,
        )
        tx.insert("channel_messages", message)
        self.ctx.events.record(
            tx,
            "channel.message",
            actor=sender_id,
            subject=f"channel:{channel_id}",
            payload={"message_id": message_id, "seq": seq, "round": round, "task_id": task_id},
        )
        data = {"type": "message", "seq": seq, "message": message.model_dump(mode="json")}
        topic = channel_topic(channel_id)
        self.ctx.bus.publish_on_commit(tx, topic, data)
        return message

    async def post(
        self,
        caller: Principal,
        channel_id: str,
        content: str,
        *,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
        then: Callable[[Tx, ChannelMessage], Awaitable[None]] | None = None,
    ) -> Posted:
        """Post as the caller. In a work channel a message from anyone but its agent wakes the
        agent (C2); in a group or discussion channel it starts (or supersedes) a discussion
        task (C10); in a closed discussion the moderator only answers that it is closed (C8).
        ``then`` runs in the post's transaction (a bridge records its relay there, so a relay
        and its message commit together)."""
        size = check_content(content, "message content", self.ctx.settings.message_max_bytes)
        if not content.strip():
            raise InvalidRequest("message content is empty", code="empty_message")
        if reply_to is not None:
            check_text(reply_to, "reply_to")
        assert self.runner is not None
        # A post is text stored by its sender, like mail: it counts against the same quota.
        ticket = self.ctx.quotas.ticket(caller)
        ticket.charge(messages=1, nbytes=size)
        try:
            return await self.runner.post_trigger(
                caller, channel_id, content, reply_to=reply_to, metadata=metadata, then=then
            )
        except Exception:
            ticket.refund()
            raise

    async def post_as_moderator(
        self, tx: Tx, channel_id: str, content: str, **kw: Any
    ) -> ChannelMessage:
        return await self.append(
            tx, channel_id, sender_id=MODERATOR_ID, sender_kind="moderator", content=content, **kw
        )

    async def post_as_system(self, tx: Tx, channel_id: str, content: str) -> ChannelMessage:
        return await self.append(
            tx, channel_id, sender_id=SYSTEM_ID, sender_kind="system", content=content
        )
