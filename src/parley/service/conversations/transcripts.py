"""A channel's transcript (C1, C2): who may read a channel, its messages and the agents' logical
sessions in it, and appending a message. Every message is persisted before it is published.

This is what both the channel service (:mod:`.channels`) and the discussion tasks (:mod:`.tasks`)
need: tasks read and append here, and channels build on it (creation, membership, posting that
starts a task) — so neither imports the other in a circle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from parley.core.channels import Channel, ChannelMessage, LogicalSession, SenderKind
from parley.core.errors import NotFound, PermissionDenied
from parley.core.identity import MODERATOR_ID, SYSTEM_ID, Principal
from parley.core.ids import new_id, new_ulid
from parley.core.limits import check_seq, check_size, check_text
from parley.core.ports import Page, Tx
from parley.service.context import ServiceContext
from parley.service.identity import Identity


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


class Posted(BaseModel):
    """A posted message and the task it started, if any."""

    message: ChannelMessage
    task_id: str | None = None


class Transcripts:
    """Reading and appending a channel's messages, as a caller who may see it."""

    def __init__(self, ctx: ServiceContext, identity: Identity) -> None:
        self.ctx = ctx
        self.identity = identity

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
