"""The event log (P4)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from parley.core.events import Event
from parley.service.identity import require_operator
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["events"], responses=ERROR_RESPONSES)


@router.get("/v1/events", response_model=list[Event])
async def list_events(
    caller: Caller,
    hub: HubDep,
    after: str | None = None,
    type: str | None = None,
    subject: str | None = None,
    actor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Event]:
    """Events in order (operator only). ``type`` ending in '.' matches a prefix."""
    require_operator(caller, "read the event log")
    async with hub.store.read() as tx:
        return await hub.ctx.events.query(
            tx, after=after, type=type, subject=subject, actor=actor, limit=limit
        )
