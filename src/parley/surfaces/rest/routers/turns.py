"""Turns of remote agents: wait for the next one, answer it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from parley.core.channels import PendingTurn
from parley.core.limits import StorableText
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["turns"], responses=ERROR_RESPONSES)


class SpeakRequest(BaseModel):
    text: StorableText = Field(min_length=1, max_length=100_000)


@router.get(
    "/v1/turns/next",
    response_model=PendingTurn,
    responses={204: {"description": "No turn arrived before the timeout"}},
)
async def next_turn(
    caller: Caller,
    hub: HubDep,
    timeout_s: Annotated[float, Query(ge=0, le=300)] = 30.0,
) -> PendingTurn | Response:
    """Long poll: the caller's oldest pending turn, as soon as there is one."""
    turn = await hub.turns.next(caller, timeout_s)
    return turn if turn is not None else Response(status_code=204)


@router.post("/v1/turns/{turn_id}/speak", response_model=PendingTurn)
async def speak(turn_id: str, body: SpeakRequest, caller: Caller, hub: HubDep) -> PendingTurn:
    """Answer a pending turn; refused with ``new_message`` if a newer message superseded it."""
    return await hub.turns.speak(caller, turn_id, body.text)


@router.post("/v1/turns/{turn_id}/no_reply", response_model=PendingTurn)
async def no_reply(turn_id: str, caller: Caller, hub: HubDep) -> PendingTurn:
    """Pass a pending turn (NO_REPLY)."""
    return await hub.turns.no_reply(caller, turn_id)
