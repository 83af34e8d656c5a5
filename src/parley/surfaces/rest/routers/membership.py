"""Channel membership consent: an agent's allow-list and the invitations it accepts or declines."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from parley.core.consent import Invitation
from parley.core.limits import StorableText
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["membership"], responses=ERROR_RESPONSES)


class ConsentBody(BaseModel):
    """Who may add the agent to channels without an invitation: principal ids, or '*'."""

    accepts_channels_from: list[StorableText] = Field(max_length=200)


class ConsentView(BaseModel):
    agent_id: str
    accepts_channels_from: list[str]


class InviteRequest(BaseModel):
    agent_id: StorableText = Field(min_length=1, max_length=64)


@router.get("/v1/agents/{agent_id}/consent", response_model=ConsentView)
async def get_consent(agent_id: str, caller: Caller, hub: HubDep) -> ConsentView:
    """Whom the agent lets add it to channels (the agent itself or the operator)."""
    allowed = await hub.identity.consent_of(caller, agent_id)
    return ConsentView(agent_id=agent_id, accepts_channels_from=allowed)


@router.put("/v1/agents/{agent_id}/consent", response_model=ConsentView)
async def set_consent(agent_id: str, body: ConsentBody, caller: Caller, hub: HubDep) -> ConsentView:
    """Replace whom the agent lets add it to channels (the agent itself or the operator);
    ``[]`` means nobody: others must invite it."""
    agent = await hub.identity.set_consent(caller, agent_id, body.accepts_channels_from)
    return ConsentView(agent_id=agent_id, accepts_channels_from=agent.accepts_channels_from)


@router.post(
    "/v1/channels/{channel_id}/invitations",
    response_model=Invitation,
    status_code=201,
    tags=["channels"],
)
async def invite(channel_id: str, body: InviteRequest, caller: Caller, hub: HubDep) -> Invitation:
    """A member invites an agent into a group or discussion channel; the agent gets a notice
    and joins only when it accepts."""
    return await hub.invitations.invite(caller, channel_id, body.agent_id)


@router.get("/v1/invitations", response_model=list[Invitation])
async def list_invitations(
    caller: Caller,
    hub: HubDep,
    status: Literal["pending", "accepted", "declined", "all"] = "pending",
) -> list[Invitation]:
    """Invitations you received or sent (all, for the operator), newest first."""
    return await hub.invitations.of(caller, None if status == "all" else status)


@router.post("/v1/invitations/{invitation_id}/accept", response_model=Invitation)
async def accept_invitation(invitation_id: str, caller: Caller, hub: HubDep) -> Invitation:
    """The invited agent joins the channel."""
    return await hub.invitations.accept(caller, invitation_id)


@router.post("/v1/invitations/{invitation_id}/decline", response_model=Invitation)
async def decline_invitation(invitation_id: str, caller: Caller, hub: HubDep) -> Invitation:
    """The invited agent stays out of the channel."""
    return await hub.invitations.decline(caller, invitation_id)
