"""Live streams: an inbox, and the whole hub (operator)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from parley.core.mail import InboxFilter
from parley.service.identity import require_operator
from parley.service.mail.mailbox import inbox_topic
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES
from parley.surfaces.rest.sse import (
    PAGE_ROWS,
    BackfillPage,
    SseItem,
    last_event_id,
    seq_position,
    stream,
)

router = APIRouter(tags=["streams"], responses=ERROR_RESPONSES)

_SSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "Server-sent events"}
}


@router.get("/v1/agents/{owner}/inbox/stream", response_class=EventSourceResponse, responses=_SSE)
async def inbox_stream(
    owner: str, request: Request, caller: Caller, hub: HubDep, last_id: str | None = None
) -> EventSourceResponse:
    """New mail in an inbox as it arrives; event id = inbox position, resumable with
    Last-Event-ID."""
    hub.mail._check_inbox_owner(caller, owner)
    await hub.identity.require(owner)
    after = seq_position(last_event_id(request, last_id))

    async def backfill(last: str | None) -> BackfillPage:
        flt = InboxFilter(
            after_seq=int(last) if last else 0, include_archived=True, limit=PAGE_ROWS
        )
        async with hub.store.read() as tx:
            page = await tx.inbox_page(owner, flt, max_bytes=hub.settings.page_max_bytes)
        items = [SseItem(str(r.seq), "mail", r.model_dump(mode="json")) for r in page.rows]
        return BackfillPage(items, page.more)

    def from_live(data: dict[str, Any]) -> SseItem | None:
        if data.get("type") != "mail":
            return None
        return SseItem(str(data["seq"]), "mail", data["message"])

    async def on_sent(items: list[SseItem]) -> None:
        if caller.id == owner:
            ids = [it.data["id"] for it in items if it.data.get("status") == "pending"]
            await hub.mail.mark_delivered(owner, ids)

    return stream(
        request,
        hub.bus,
        [inbox_topic(owner)],
        after=after,
        backfill=backfill,
        from_live=from_live,
        order=int,
        on_sent=on_sent,
    )


@router.get("/v1/events/stream", response_class=EventSourceResponse, responses=_SSE)
async def hub_stream(
    request: Request, caller: Caller, hub: HubDep, last_id: str | None = None
) -> EventSourceResponse:
    """Every event of the hub as it happens (operator only); resumable with Last-Event-ID."""
    require_operator(caller, "watch the whole hub")
    after = last_event_id(request, last_id)

    async def backfill(last: str | None) -> BackfillPage:
        if last is None:
            # A fresh watcher starts from now; it resumes with Last-Event-ID.
            return BackfillPage([], more=False)
        async with hub.store.read() as tx:
            page = await hub.ctx.events.page(
                tx, after=last, limit=PAGE_ROWS, max_bytes=hub.settings.page_max_bytes
            )
        items = [SseItem(ev.id, "event", ev.model_dump(mode="json")) for ev in page.rows]
        return BackfillPage(items, page.more)

    def from_live(data: dict[str, Any]) -> SseItem | None:
        if data.get("type") != "event":
            return None
        return SseItem(data["event"]["id"], "event", data["event"])

    return stream(
        request,
        hub.bus,
        ["hub"],
        after=after,
        backfill=backfill,
        from_live=from_live,
        order=str,
        # Several hubs on one PostgreSQL make event ids; they commit in another order.
        late_ids=hub.bus.shared,
    )
