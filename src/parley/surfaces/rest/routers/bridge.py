"""The chat bridge's REST side: one-time link codes that bind a Discord user to a hub human
(``parley discord link``; the Discord user runs ``/link <code>``), the links, and unlinking."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from parley.core.bridge import BridgeLink
from parley.core.limits import StorableText
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["discord"], responses=ERROR_RESPONSES)


class LinkCodeRequest(BaseModel):
    principal_id: StorableText | None = Field(
        default=None,
        max_length=64,
        description="The human to link; the caller when omitted (only the operator names another).",
    )


class LinkCodeOut(BaseModel):
    """A one-time code, shown only here; it works once, within ``expires_in_s`` seconds, and
    only while the human's token is not rotated."""

    code: str
    principal_id: str
    expires_in_s: float


class LinkOut(BaseModel):
    """A Discord user acting as a hub human."""

    user_id: str = Field(description="The Discord user's id.")
    principal_id: str
    created: datetime


class UnlinkRequest(BaseModel):
    principal_id: StorableText | None = Field(
        default=None,
        max_length=64,
        description="End this human's links (only the operator names another); the caller's "
        "when omitted.",
    )
    user_id: StorableText | None = Field(
        default=None,
        max_length=64,
        description="End only this Discord user's link.",
    )


class UnlinkOut(BaseModel):
    unlinked: list[LinkOut]


def link_out(link: BridgeLink) -> LinkOut:
    return LinkOut(user_id=link.id, principal_id=link.principal_id, created=link.created)


@router.post("/v1/discord/link-codes", response_model=LinkCodeOut, status_code=201)
async def new_link_code(body: LinkCodeRequest, caller: Caller, hub: HubDep) -> LinkCodeOut:
    """A code that links the Discord user who runs ``/link <code>`` to a hub human."""
    issued = await hub.bridge_links.create_code(caller, body.principal_id)
    return LinkCodeOut(
        code=issued.code, principal_id=issued.principal_id, expires_in_s=issued.ttl_s
    )


@router.get("/v1/discord/links", response_model=list[LinkOut])
async def links(
    caller: Caller,
    hub: HubDep,
    principal_id: Annotated[
        str | None,
        Query(max_length=64, description="Whose links (only the operator names another)."),
    ] = None,
) -> list[LinkOut]:
    """The caller's links; the operator sees everyone's, or one human's."""
    return [link_out(link) for link in await hub.bridge_links.links(caller, principal_id)]


@router.post("/v1/discord/unlink", response_model=UnlinkOut)
async def unlink(body: UnlinkRequest, caller: Caller, hub: HubDep) -> UnlinkOut:
    """End links: one Discord user's, or every link of a human (the caller's when none is
    named). The operator may unlink anyone; each link ended is a ``bridge.unlinked`` event."""
    ended = await hub.bridge_links.unlink(
        caller, principal_id=body.principal_id, user_id=body.user_id
    )
    return UnlinkOut(unlinked=[link_out(link) for link in ended])
