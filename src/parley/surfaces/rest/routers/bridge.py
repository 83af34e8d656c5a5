"""The chat bridge's REST side: one-time link codes that bind a Discord user to a hub human
(``parley discord link``; the Discord user runs ``/link <code>``)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from parley.core.bridge import LINK_CODE_TTL_S
from parley.core.limits import StorableText
from parley.service.bridge import create_link_code
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
    """A one-time code, shown only here; it works once, within ``expires_in_s`` seconds."""

    code: str
    principal_id: str
    expires_in_s: float


@router.post("/v1/discord/link-codes", response_model=LinkCodeOut, status_code=201)
async def new_link_code(body: LinkCodeRequest, caller: Caller, hub: HubDep) -> LinkCodeOut:
    """A code that links the Discord user who runs ``/link <code>`` to a hub human."""
    code = await create_link_code(hub, caller, body.principal_id)
    return LinkCodeOut(
        code=code, principal_id=body.principal_id or caller.id, expires_in_s=LINK_CODE_TTL_S
    )
