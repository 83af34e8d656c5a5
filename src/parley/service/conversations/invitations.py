"""Invitations: how an agent joins a channel with its consent. A member invites, the agent is told
by a ``notice`` in its inbox, and only the agent's own ``accept`` makes it a member (core/consent).
"""

from __future__ import annotations

from typing import Literal

from parley.core import discussion as d
from parley.core.channels import Channel, refuse_meeting_channel
from parley.core.consent import Invitation, InvitationStatus
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail

INVITABLE_KINDS = ("group", "discussion")
LIST_LIMIT = 200


class Invitations:
    """Invite agents into channels; they accept or decline."""

    def __init__(
        self, ctx: ServiceContext, identity: Identity, channels: Channels, mail: Mail
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.channels = channels
        self.mail = mail

    async def invite(self, caller: Principal, channel_id: str, agent_id: str) -> Invitation:
        """A member (or the operator) invites an agent; a second invitation while one is pending
        returns the pending one."""

        async def job(tx: Tx) -> Invitation:
            channel = await self.channels.get(caller, channel_id, tx)
            if not (caller.is_operator or caller.id in channel.members):
                raise PermissionDenied(
                    f"{caller.id!r} is not a member of channel {channel_id!r}; only its members "
                    "and the operator may invite",
                    code="not_channel_member",
                )
            refuse_meeting_channel(channel, "take invitations")
            _check_invitable(channel)
            agent = await self.identity.require(agent_id, tx)
            if agent.kind != "agent":
                raise InvalidRequest(
                    f"{agent_id!r} is not an agent; invitations are for agents, a human is added "
                    "by the channel's creator or the operator",
                    code="invitee_not_agent",
                )
            if agent_id in channel.members:
                raise Conflict(
                    f"{agent_id!r} is already a member of channel {channel_id!r}",
                    code="already_member",
                )
            i = tx.table("invitations").c
            pending = await tx.select(
                "invitations",
                i.channel_id == channel_id,
                i.agent_id == agent_id,
                i.status == "pending",
            )
            if pending:
                existing: Invitation = pending[0]
                return existing
            invitation = Invitation(
                id=new_ulid(),
                channel_id=channel_id,
                agent_id=agent_id,
                invited_by=caller.id,
                created=self.ctx.clock.now(),
            )
            tx.insert("invitations", invitation)
            self._record(tx, "invitation.created", caller, invitation)
            await self.mail.deliver_system(
                tx,
                agent_id,
                "notice",
                f"{caller.id} invites you to channel {channel.name!r}",
                f"{caller.id} invites you to the {channel.kind} channel {channel.name!r}. As a "
                "member you are given turns there. Accept with the accept_invitation tool (or "
                f"`parley invitation accept {invitation.id}`), or decline with "
                "decline_invitation.",
                {
                    "invitation_id": invitation.id,
                    "channel_id": channel_id,
                    "channel_name": channel.name,
                    "invited_by": caller.id,
                    "next": "accept_invitation",
                },
            )
            return invitation

        return await self.ctx.store.write(job)

    async def accept(self, caller: Principal, invitation_id: str) -> Invitation:
        """The invitee joins the channel; its next task includes it (C12)."""
        return await self._decide(caller, invitation_id, "accepted")

    async def decline(self, caller: Principal, invitation_id: str) -> Invitation:
        return await self._decide(caller, invitation_id, "declined")

    async def _decide(
        self, caller: Principal, invitation_id: str, status: Literal["accepted", "declined"]
    ) -> Invitation:
        async def job(tx: Tx) -> Invitation:
            invitation: Invitation | None = await tx.get(
                "invitations", invitation_id, for_update=True
            )
            if invitation is None or invitation.agent_id != caller.id:
                # Another principal's invitation is reported as missing: its existence would
                # tell who is being asked into which channel.
                raise NotFound(
                    f"no invitation {invitation_id!r} for {caller.id!r}; list yours with `parley "
                    "invitation list` (REST: GET /v1/invitations)",
                    code="invitation_not_found",
                )
            if invitation.status != "pending":
                raise Conflict(
                    f"invitation {invitation_id!r} is already {invitation.status}",
                    code="invitation_closed",
                )
            if status == "accepted":
                await self._join(tx, caller, invitation)
            decided = invitation.model_copy(
                update={"status": status, "decided": self.ctx.clock.now()}
            )
            await tx.update("invitations", invitation_id, status=status, decided=decided.decided)
            self._record(tx, f"invitation.{status}", caller, decided)
            await self.mail.deliver_system(
                tx,
                invitation.invited_by,
                "notice",
                f"{caller.id} {status} your invitation",
                f"{caller.id} {status} your invitation to channel {invitation.channel_id}.",
                {"invitation_id": invitation.id, "channel_id": invitation.channel_id},
            )
            return decided

        return await self.ctx.store.write(job)

    async def _join(self, tx: Tx, caller: Principal, invitation: Invitation) -> None:
        channel = await tx.get_channel(invitation.channel_id, for_update=True)
        if channel is None or channel.status != "active":
            raise Conflict(
                f"channel {invitation.channel_id!r} is no longer open; the invitation cannot be "
                "accepted (decline it)",
                code="channel_not_open",
            )
        if caller.id in channel.members:
            return
        members = d.snapshot_members([*channel.members, caller.id])
        await tx.set_members(channel.id, members)
        self.ctx.events.record(
            tx,
            "channel.updated",
            actor=caller.id,
            subject=f"channel:{channel.id}",
            payload={"members": members, "invitation_id": invitation.id},
        )

    async def of(
        self, caller: Principal, status: InvitationStatus | None = "pending"
    ) -> list[Invitation]:
        """Invitations the caller received or sent (all of them, for the operator), newest
        first."""
        async with self.ctx.store.read() as tx:
            i = tx.table("invitations").c
            where = [] if status is None else [i.status == status]
            if not caller.is_operator:
                where.append((i.agent_id == caller.id) | (i.invited_by == caller.id))
            rows: list[Invitation] = await tx.select(
                "invitations", *where, order_by=[i.id.desc()], limit=LIST_LIMIT
            )
        return rows

    def _record(self, tx: Tx, type: str, actor: Principal, invitation: Invitation) -> None:
        self.ctx.events.record(
            tx,
            type,
            actor=actor.id,
            subject=f"channel:{invitation.channel_id}",
            payload={
                "invitation_id": invitation.id,
                "agent_id": invitation.agent_id,
                "invited_by": invitation.invited_by,
            },
        )


def _check_invitable(channel: Channel) -> None:
    if channel.kind not in INVITABLE_KINDS:
        raise Conflict(
            f"channel {channel.id!r} is a {channel.kind} channel, whose members are fixed; invite "
            "agents into a group or discussion channel",
            code="channel_not_invitable",
        )
    if channel.status != "active":
        raise Conflict(
            f"channel {channel.id!r} is {channel.status}; invite only into an open channel",
            code="channel_not_open",
        )
