"""What the agents' turns cost (usage totals and budgets) and search over mail and channels:
both pages call the same services as the API, as the signed-in principal."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from parley.core.errors import InvalidRequest, ParleyError
from parley.core.search import SearchQuery
from parley.core.usage import USAGE_GROUPS, UsageFilter, UsageTotal, spent_beyond
from parley.surfaces.web.auth import ViewerDep, hub_of
from parley.surfaces.web.render import page

router = APIRouter()


def _time(value: str, name: str) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidRequest(
            f"{name} {value!r} is not a date or time", code="invalid_time"
        ) from exc


def _text(request: Request, name: str) -> str:
    return request.query_params.get(name, "").strip()


@router.get("/usage", response_class=HTMLResponse)
async def usage(request: Request, viewer: ViewerDep) -> HTMLResponse:
    """Tokens and cost by agent, day, model, worker tree, discussion, meeting or channel; the
    operator sees every agent's turns, anyone else its own."""
    hub = hub_of(request)
    by = _text(request, "by") or "agent"
    filters = {k: _text(request, k) for k in ("by", "agent", "model", "worker", "since", "until")}
    filters["by"] = by
    groups: list[UsageTotal] = []
    total = UsageTotal(key=None)
    budgets: list[dict[str, Any]] = []
    error = None
    try:
        flt = UsageFilter(
            agent_id=filters["agent"] or None,
            model=filters["model"] or None,
            worker_tree=filters["worker"] or None,
            since=_time(filters["since"], "since"),
            until=_time(filters["until"], "until"),
        )
        groups = await hub.usage.totals(viewer.principal, by, flt)
        whole = await hub.usage.totals(viewer.principal, None, flt)
        total = whole[0] if whole else total
        budgets = [
            {"budget": b, "spent": t, "exhausted": spent_beyond(b, t) is not None}
            for b, t in await hub.usage.budgets(viewer.principal)
        ]
    except ParleyError as exc:
        error = f"Refused ({exc.code}): {exc.message}"
    return page(
        request,
        viewer,
        "usage.html",
        status_code=200 if error is None else 400,
        groups=groups,
        total=total,
        budgets=budgets,
        by=by,
        choices=USAGE_GROUPS,
        filters=filters,
        error=error,
    )


@router.get("/search", response_class=HTMLResponse)
async def search(request: Request, viewer: ViewerDep) -> HTMLResponse:
    """Mail and channel messages the viewer may read that hold the words, newest first."""
    hub = hub_of(request)
    names = ("q", "source", "sender", "kind", "channel", "since", "until")
    filters = {k: _text(request, k) for k in names}
    asked = any(filters.values())
    hits: list[Any] = []
    error = None
    if asked:
        try:
            source = filters["source"] or None
            if source not in (None, "mail", "channel"):
                raise InvalidRequest("source is mail or channel", code="invalid_search")
            query = SearchQuery(
                text=filters["q"],
                source=source,
                sender=filters["sender"] or None,
                kind=filters["kind"] or None,
                channel_id=filters["channel"] or None,
                since=_time(filters["since"], "since"),
                until=_time(filters["until"], "until"),
            )
            hits = await hub.search.find(viewer.principal, query)
        except ParleyError as exc:
            error = f"Refused ({exc.code}): {exc.message}"
    return page(
        request,
        viewer,
        "search.html",
        status_code=200 if error is None else 400,
        hits=hits,
        asked=asked,
        filters=filters,
        error=error,
    )
