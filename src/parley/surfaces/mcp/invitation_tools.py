"""Invitation tools: how an agent asks another into a channel and how it accepts or declines. The
descriptions state the consent rule the hub enforces (core/consent.py)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from parley.core.consent import Invitation
from parley.service.hub import Hub
from parley.surfaces.mcp.auth import Authenticator
from parley.surfaces.mcp.mail_tools import ToolFunction
from parley.surfaces.mcp.results import json_result, without_empty

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


def functions(hub: Hub, auth: Authenticator) -> dict[str, ToolFunction]:
    """The tool functions over ``hub``; each authenticates its caller with ``auth``."""

    async def invite_to_channel(
        ctx: Context[Any, Any],
        channel_id: Annotated[str, Field(max_length=64, description="channel id")],
        agent_id: Annotated[str, Field(max_length=64, description="agent to invite")],
    ) -> CallToolResult:
        caller = await auth(ctx)
        return json_result(
            invitation_view(await hub.invitations.invite(caller, channel_id, agent_id))
        )

    invite_to_channel.__doc__ = INVITE

    async def list_invitations(ctx: Context[Any, Any]) -> CallToolResult:
        caller = await auth(ctx)
        rows = [invitation_view(i) for i in await hub.invitations.of(caller)]
        return json_result({"invitations": rows, "count": len(rows)})

    list_invitations.__doc__ = LIST_INVITATIONS

    async def accept_invitation(
        ctx: Context[Any, Any],
        invitation_id: Annotated[str, Field(max_length=64, description="from the notice")],
    ) -> CallToolResult:
        caller = await auth(ctx)
        return json_result(invitation_view(await hub.invitations.accept(caller, invitation_id)))

    accept_invitation.__doc__ = ACCEPT

    async def decline_invitation(
        ctx: Context[Any, Any],
        invitation_id: Annotated[str, Field(max_length=64, description="from the notice")],
    ) -> CallToolResult:
        caller = await auth(ctx)
        return json_result(invitation_view(await hub.invitations.decline(caller, invitation_id)))

    decline_invitation.__doc__ = DECLINE

    return {
        "invite_to_channel": invite_to_channel,
        "list_invitations": list_invitations,
        "accept_invitation": accept_invitation,
        "decline_invitation": decline_invitation,
    }
