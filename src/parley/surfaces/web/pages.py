"""The overview, the mail inbox with its thread view, and the event log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from sse_starlette.sse import EventSourceResponse

from parley.core.channels import Task
from parley.core.errors import ParleyError, PermissionDenied
from parley.core.identity import Principal
from parley.core.mail import InboxFilter, MailSummary
from parley.service.hub import Hub
from parley.service.identity import require_operator
from parley.service.mail.mailbox import inbox_topic
from parley.surfaces.web.attention import EVENTS as NEEDS_EVENTS
from parley.surfaces.web.attention import needs
from parley.surfaces.web.auth import Viewer, ViewerDep, hub_of
from parley.surfaces.web.live import Panel, about_events, live
from parley.surfaces.web.render import fragment, page
from parley.surfaces.web.waits import meeting_waits, pending_turns, task_waits

router = APIRouter()

FAILED_ENDS = ("failed", "interrupted")
RECENT = 10
EVENTS_SHOWN = 50


async def _agents(hub: Hub, viewer: Principal) -> list[Principal]:
    """The agents the viewer may watch: all for the operator and humans, else itself."""
    if viewer.kind == "agent":
        return [viewer]
    return [a for a in await hub.identity.list("agent") if a.active]


async def _summaries(hub: Hub, viewer: Principal, agents: list[Principal]) -> list[MailSummary]:
    found = []
    for agent in agents:
        try:
            found.append(await hub.mail.summary(viewer, agent.id))
        except PermissionDenied:
            continue  # the service decides whose inbox the viewer may read
    return found


async def _running_tasks(hub: Hub, viewer: Principal) -> list[Task]:
    running = [live.task for live in hub.tasks.live.values()]
    visible = await hub.channels.visible_among(viewer, {t.channel_id for t in running})
    return sorted((t for t in running if t.channel_id in visible), key=lambda t: t.id)


async def _recent_failures(hub: Hub, viewer: Principal) -> list[Task]:
    """The newest tasks that failed or were interrupted, in channels the viewer may see."""
    async with hub.store.read() as tx:
        t = tx.table("tasks").c
        rows: list[Task] = await tx.select(
            "tasks", t.end_reason.in_(FAILED_ENDS), order_by=[t.id.desc()], limit=RECENT * 5
        )
    visible = await hub.channels.visible_among(viewer, {task.channel_id for task in rows})
    return [task for task in rows if task.channel_id in visible][:RECENT]


async def _overview(hub: Hub, viewer: Principal) -> dict[str, Any]:
    agents = await _agents(hub, viewer)
    working = {m for live in hub.tasks.live.values() for m in live.task.members}
    meetings = await hub.meetings.latest(viewer, RECENT)
    workers = await hub.workers.listing(viewer, limit=RECENT)
    tasks = await _running_tasks(hub, viewer)
    meeting_wait = {
        m.id: meeting_waits(await pending_turns(hub, channel_id=m.channel_id), m)
        for m in meetings
        if m.status == "running"
    }
    return {
        "agents": agents,
        "working": working,
        "summaries": await _summaries(hub, viewer, agents),
        "tasks": tasks,
        "waits": await task_waits(hub, tasks),
        "meeting_waits": meeting_wait,
        "meetings": meetings,
        "workers": workers,
        "failures": await _recent_failures(hub, viewer),
        "needs": await needs(hub, viewer),
    }


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request, viewer: ViewerDep) -> HTMLResponse:
    data = await _overview(hub_of(request), viewer.principal)
    return page(request, viewer, "overview.html", **data)


OVERVIEW_EVENTS = ("mail.", "task.", "meeting.", "room.", "worker.", "agent.created", "human.")
"""Events that change what the overview shows; a message in a channel does not."""


@router.get("/overview/live")
async def overview_live(request: Request, viewer: ViewerDep) -> EventSourceResponse:
    """The overview's panels again after something they show changed, rendered as the
    viewer."""
    hub = hub_of(request)

    async def render() -> str:
        return fragment("_overview.html", **await _overview(hub, viewer.principal))

    overview = Panel(
        "overview",
        Panel.key_for(viewer, "overview"),
        ("hub",),
        render,
        about_events(*OVERVIEW_EVENTS, *NEEDS_EVENTS),
    )
    return live(request, viewer, panels=[overview])


# -- mail ------------------------------------------------------------------------------------------
@dataclass
class InboxQuery:
    """The inbox page's query: whose inbox (the viewer's when empty) and its filters."""

    owner: str = ""
    status: str = ""
    kind: str = ""
    from_id: str = ""
    archived: bool = False

    def owner_for(self, viewer: Principal) -> str:
        return self.owner or viewer.id

    def filter(self) -> InboxFilter:
        return InboxFilter(
            status=[self.status] if self.status else None,
            kind=self.kind or None,
            from_id=self.from_id or None,
            include_archived=self.archived,
            limit=200,
        )


InboxQueryDep = Annotated[InboxQuery, Depends()]


@router.get("/mail", response_class=HTMLResponse)
async def inbox(request: Request, viewer: ViewerDep, query: InboxQueryDep) -> HTMLResponse:
    """An inbox with filters, live; whose inbox the viewer may read is the mail service's
    decision."""
    hub = hub_of(request)
    owner = query.owner_for(viewer.principal)
    messages: list[Any] = []
    error = None
    try:
        flt = query.filter()
        messages = (await hub.mail.inbox_page(viewer.principal, owner, flt)).rows
    except ParleyError as exc:
        error = f"Refused ({exc.code}): {exc.message}"
    agents = await _agents(hub, viewer.principal)
    return page(
        request,
        viewer,
        "mail.html",
        status_code=200 if error is None else 403,
        owner=owner,
        # Whose inbox the viewer may open: its own, and the operator's every agent's too (the
        # mail service's rule; a human or an agent offered another's inbox would be refused).
        owners=[a.id for a in agents] + [viewer.principal.id]
        if viewer.principal.is_operator
        else [viewer.principal.id],
        messages=messages,
        error=error,
        query=request.url.query,
        filters={
            "status": query.status,
            "kind": query.kind,
            "from_id": query.from_id,
            "archived": query.archived,
        },
    )


@router.get("/mail/live")
async def inbox_live(
    request: Request, viewer: ViewerDep, query: InboxQueryDep
) -> EventSourceResponse:
    """The inbox table again whenever the inbox changes."""
    hub = hub_of(request)
    owner = query.owner_for(viewer.principal)
    flt = query.filter()
    await hub.mail.inbox_page(viewer.principal, owner, flt.model_copy(update={"limit": 1}))

    async def render() -> str:
        messages = (await hub.mail.inbox_page(viewer.principal, owner, flt)).rows
        return fragment("_inbox.html", messages=messages)

    what = ("inbox", owner, query.status, query.kind, query.from_id, query.archived)
    inbox = Panel("inbox", Panel.key_for(viewer, *what), (inbox_topic(owner),), render)
    return live(request, viewer, panels=[inbox])


@router.get("/mail/thread/{message_id}", response_class=HTMLResponse)
async def thread(request: Request, viewer: ViewerDep, message_id: str) -> HTMLResponse:
    hub = hub_of(request)
    try:
        messages = await hub.mail.thread(viewer.principal, message_id)
    except ParleyError as exc:
        return page(
            request,
            viewer,
            "thread.html",
            status_code=404 if exc.code.endswith("not_found") else 403,
            messages=[],
            error=f"Refused ({exc.code}): {exc.message}",
        )
    return page(request, viewer, "thread.html", messages=messages, error=None)


# -- the event log ---------------------------------------------------------------------------------
@dataclass
class EventQuery:
    """The event log's filters and where its page starts (older than ``before``)."""

    type: str = ""
    subject: str = ""
    actor: str = ""
    before: Annotated[str, Query(max_length=64)] = ""

    def filters(self) -> dict[str, str]:
        return {"type": self.type, "subject": self.subject, "actor": self.actor}


EventQueryDep = Annotated[EventQuery, Depends()]


async def _events(hub: Hub, query: EventQuery) -> dict[str, Any]:
    """One page of the log, newest first, and where the next (older) page starts."""
    async with hub.store.read() as tx:
        rows = await hub.ctx.events.latest(
            tx,
            type=query.type,
            subject=query.subject,
            actor=query.actor,
            before=query.before or None,
            limit=EVENTS_SHOWN + 1,
        )
    more = len(rows) > EVENTS_SHOWN
    rows = rows[:EVENTS_SHOWN]
    older = {**query.filters(), "before": rows[-1].id} if more and rows else None
    first = query.filters() if query.before else None
    return {
        "events": rows,
        "older": urlencode({k: v for k, v in older.items() if v}) if older else None,
        "newest": urlencode({k: v for k, v in first.items() if v}) if first is not None else None,
    }


@router.get("/events", response_class=HTMLResponse)
async def event_log(request: Request, viewer: ViewerDep, query: EventQueryDep) -> HTMLResponse:
    """The event log, newest first, a page at a time, filtered, live (operator only, as over
    REST)."""
    try:
        require_operator(viewer.principal, "read the event log")
    except PermissionDenied as exc:
        error = f"Refused ({exc.code}): {exc.message}"
        return _events_page(request, viewer, {"events": []}, error, query)
    shown = await _events(hub_of(request), query)
    return _events_page(request, viewer, shown, None, query)


@router.get("/events/live")
async def event_log_live(
    request: Request, viewer: ViewerDep, query: EventQueryDep
) -> EventSourceResponse:
    require_operator(viewer.principal, "read the event log")
    hub = hub_of(request)

    async def render() -> str:
        return fragment("_events.html", **await _events(hub, query))

    key = Panel.key_for(viewer, "events", query.type, query.subject, query.actor, query.before)
    return live(request, viewer, panels=[Panel("events", key, ("hub",), render)])


def _events_page(
    request: Request,
    viewer: Viewer,
    shown: dict[str, Any],
    error: str | None,
    query: EventQuery,
) -> HTMLResponse:
    return page(
        request,
        viewer,
        "events.html",
        status_code=200 if error is None else 403,
        error=error,
        query=request.url.query,
        filters=query.filters(),
        **shown,
    )
