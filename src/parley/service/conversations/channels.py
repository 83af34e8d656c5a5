"""Channels (C1, C2): creation, membership, deletion and posting. Reading and appending a
channel's messages is its transcript's (:mod:`.transcripts`); the sender of a post is always the
caller the server authenticated."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from parley.core import consent, names
from parley.core import discussion as d
from parley.core.channels import (
    CREATED_KINDS,
    Channel,
    ChannelMessage,
    refuse_meeting_channel,
)
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import OPERATOR_ID, Principal
from parley.core.ids import new_ulid
from parley.core.limits import StorableText, check_text
from parley.core.ports import Page, Tx
from parley.service.context import ServiceContext
from parley.service.conversations.tasks import TaskRunner
from parley.service.conversations.transcripts import (
    ACCESS_CHANGED,
    Posted,
    Transcripts,
    channel_topic,
    check_content,
)
from parley.service.identity import Identity


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


class Channels(Transcripts):
    """The channel service: a channel's transcript (:class:`Transcripts`) plus creating,
    changing, deleting and posting, which starts or supersedes the channel's task."""

    def __init__(self, ctx: ServiceContext, identity: Identity, runner: TaskRunner) -> None:
        super().__init__(ctx, identity)
        self.runner = runner

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

    # -- names ----------------------------------------------------------------------------------
    async def resolve(self, caller: Principal, ref: str) -> str | None:
        """The id of the channel ``ref`` addresses for the caller: its id, its name, or the
        start of its id, among the channels the caller sees; refused when several fit."""
        ref = ref.strip()
        async with self.ctx.store.read() as tx:
            if await tx.get("channels", ref) is not None:
                return ref
            channels = tx.table("channels")
            c = channels.c
            kept = [c.status != "deleted"]
            if not caller.is_operator:
                # Only channels the caller sees are looked at: others' neither cost a read
                # each nor crowd its own out of the rows looked at.
                members = channels.metadata.tables["channel_members"]
                joined = members.select().with_only_columns(members.c.channel_id)
                joined = joined.where(members.c.member_id == caller.id)
                kept.append(
                    (c.created_by == caller.id) | (c.owner_agent_id == caller.id) | c.id.in_(joined)
                )
            named = await tx.select("channels", *kept, c.name == ref, order_by=[c.id], limit=50)
            prefixed: list[Channel] = []
            if len(ref) >= names.MIN_PREFIX:
                key = names.id_key(ref)
                starts = c.id.startswith(ref, autoescape=True) | c.id.startswith(
                    key, autoescape=True
                )
                prefixed = await tx.select("channels", *kept, starts, order_by=[c.id], limit=50)
            seen = [await self._named(tx, caller, ch.id) for ch in named]
            seen_prefixed = [await self._named(tx, caller, ch.id) for ch in prefixed]
        return names.choose(
            ref,
            "channel",
            [n for n in seen if n is not None],
            [n for n in seen_prefixed if n is not None],
        )

    async def _named(self, tx: Tx, caller: Principal, channel_id: str) -> names.Named | None:
        channel = await tx.get_channel(channel_id)
        if channel is None or not self.can_see(caller, channel):
            return None
        return names.Named(channel.id, channel.name, live=channel.status == "active")

    async def check_name_free(self, tx: Tx, name: str) -> None:
        """Refuse a name an open group, direct or discussion channel already has: names address
        channels, so each names one. Channels the hub names (work, meeting) are not counted,
        and a deleted or closed channel gives its name back. Held under the operator's row
        lock, so two hubs cannot both take one name."""
        await tx.get("principals", OPERATOR_ID, for_update=True)
        c = tx.table("channels").c
        taken = await tx.select(
            "channels",
            c.name == name,
            c.status == "active",
            c.kind.in_(CREATED_KINDS),
            limit=1,
        )
        if taken:
            raise names.name_taken(name, "channel", taken[0].id)

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
                "use (`parley group delete <id>`, REST: DELETE /v1/channels/{id}) or finish a "
                "discussion, then try again",
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
            await self.check_name_free(tx, spec.name)
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
