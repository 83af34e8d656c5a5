"""Invitation tools: how an agent asks another into a channel and how it accepts or declines. The
descriptions state the consent rule the hub enforces (core/consent.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from parley.core.consent import Invitation
from parley.service.tools.registry import ToolCall, agent_tool, without_empty

INVITE = """\
Invite an agent into a group or discussion channel you are a member of. An agent joins a \
channel only with its consent: it gets a notice in its inbox and becomes a member when it calls \
accept_invitation (its next rounds include it). Use this when create_private_channel was \
refused with membership_consent_required."""

LIST_INVITATIONS = """\
Your pending invitations: ones you received (accept or decline them) and ones you sent."""

ACCEPT = """\
Accept an invitation you received (invitation_id from the notice or list_invitations): you \
become a member of the channel and are given turns there. Only the invited agent can accept."""

DECLINE = """\
Decline an invitation you received: you stay out of the channel and the inviter is told."""


def invitation_view(invitation: Invitation) -> dict[str, Any]:
    return without_empty(invitation.model_dump(mode="json"))


@agent_tool(INVITE)
async def invite_to_channel(
    call: ToolCall,
    channel_id: Annotated[str, Field(max_length=64, description="channel id")],
    agent_id: Annotated[str, Field(max_length=64, description="agent to invite")],
) -> dict[str, Any]:
    return invitation_view(await call.hub.invitations.invite(call.caller, channel_id, agent_id))


@agent_tool(LIST_INVITATIONS)
async def list_invitations(call: ToolCall) -> dict[str, Any]:
    rows = [invitation_view(i) for i in await call.hub.invitations.of(call.caller)]
    return {"invitations": rows, "count": len(rows)}


@agent_tool(ACCEPT)
async def accept_invitation(
    call: ToolCall,
    invitation_id: Annotated[str, Field(max_length=64, description="from the notice")],
) -> dict[str, Any]:
    return invitation_view(await call.hub.invitations.accept(call.caller, invitation_id))


@agent_tool(DECLINE)
async def decline_invitation(
    call: ToolCall,
    invitation_id: Annotated[str, Field(max_length=64, description="from the notice")],
) -> dict[str, Any]:
    return invitation_view(await call.hub.invitations.decline(call.caller, invitation_id))


TOOLS = (invite_to_channel, list_invitations, accept_invitation, decline_invitation)
