"""Live streams: an inbox, and the whole hub (operator)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from parley.core.mail import InboxFilter
from parley.service.identity import require_operator
from parley.service.mail import inbox_topic
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES
from parley.surfaces.rest.sse import SseItem, last_event_id, seq_position, stream

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

    async def backfill(last: str | None) -> list[SseItem]:
        items: list[SseItem] = []
        after_seq = int(last) if last else 0
        async with hub.store.read() as tx:
            while True:
                flt = InboxFilter(after_seq=after_seq, include_archived=True, limit=1000)
                rows = await tx.list_inbox(owner, flt)
                items += [SseItem(str(r.seq), "mail", r.model_dump(mode="json")) for r in rows]
                if len(rows) < 1000:
                    return items
                after_seq = rows[-1].seq

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

    async def backfill(last: str | None) -> list[SseItem]:
        if last is None:
            return []  # a fresh watcher starts from now; resume with Last-Event-ID
        async with hub.store.read() as tx:
            rows = await hub.ctx.events.query(tx, after=last, limit=1000)
        return [SseItem(ev.id, "event", ev.model_dump(mode="json")) for ev in rows]

    def from_live(data: dict[str, Any]) -> SseItem | None:
        if data.get("type") != "event":
            return None
        return SseItem(data["event"]["id"], "event", data["event"])

    return stream(
        request, hub.bus, ["hub"], after=after, backfill=backfill, from_live=from_live, order=str
    )
