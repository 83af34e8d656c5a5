"""Search over mail and channel messages, with the caller's read rules."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from parley.core.search import SearchHit, SearchQuery, SearchSource
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["search"], responses=ERROR_RESPONSES)


@router.get("/v1/search", response_model=list[SearchHit])
async def search(
    caller: Caller,
    hub: HubDep,
    q: Annotated[str, Query(description="Words that must all occur (as word prefixes).")] = "",
    source: SearchSource | None = None,
    sender: str | None = None,
    kind: Annotated[str | None, Query(description="A mail kind or a channel kind.")] = None,
    channel: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> list[SearchHit]:
    """Mail and channel messages the caller may read that match, newest first."""
    query = SearchQuery(
        text=q,
        source=source,
        sender=sender,
        kind=kind,
        channel_id=channel,
        since=since,
        until=until,
        limit=limit,
    )
    return await hub.search.find(caller, query)
