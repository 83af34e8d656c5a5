"""The event log: in order from the start (or after an event), or the newest first."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from parley.core.events import Event
from parley.service.identity import require_operator
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES
from parley.surfaces.rest.paging import NEXT_DESCRIPTION, link_next

router = APIRouter(tags=["events"], responses=ERROR_RESPONSES)


@router.get(
    "/v1/events", response_model=list[Event], responses={200: {"description": NEXT_DESCRIPTION}}
)
async def list_events(
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    after: str | None = None,
    type: str | None = None,
    subject: str | None = None,
    actor: str | None = None,
    newest: bool = False,
    before: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    since: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Event]:
    """Events in order (operator only). ``type`` ending in '.' matches a prefix. A page that
    does not end the log carries a ``Link`` to the next (``after``). With ``newest``, the
    newest first: older than the event ``before`` and not older than ``since`` when given,
    with a ``Link`` to the next older page."""
    require_operator(caller, "read the event log")
    if newest or before is not None or since is not None:
        async with hub.store.read() as tx:
            rows = await hub.ctx.events.latest(
                tx, type=type, subject=subject, actor=actor, before=before, since=since, limit=limit
            )
        if rows:
            link_next(request, response, len(rows) == limit, before=rows[-1].id)
        return rows
    async with hub.store.read() as tx:
        page = await hub.ctx.events.page(
            tx,
            max_bytes=hub.settings.page_max_bytes,
            after=after,
            type=type,
            subject=subject,
            actor=actor,
            limit=limit,
        )
    if page.rows:
        link_next(request, response, page.more, after=page.rows[-1].id)
    return page.rows
