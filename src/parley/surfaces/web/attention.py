"""What needs the viewer (the navigation's badge, the overview's list, a browser notification):
an open blocker in the viewer's inbox (every blocker reaches the operator's), a meeting a stall
escalated to the viewer's seat, a worker that failed lately or waits for a person to resume it,
and a remote turn the viewer itself owes.

Each read goes through the service layer as the viewer, so what a person is shown follows the
same visibility rules as every other page; a human is shown what is theirs (their inbox, their
workers, meetings convened as them), the operator everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.service.hub import Hub
from parley.surfaces.web.auth import PREFIX, ViewerDep, hub_of
from parley.surfaces.web.live import Panel, about_events, live
from parley.surfaces.web.render import fragment

router = APIRouter()

OPEN_MAIL = ["pending", "delivered"]
"""A blocker needs someone until it is read."""
FAILED_WITHIN = timedelta(days=1)
"""A failed worker stays on the list this long (its record stays on the worker pages)."""
SHOWN = 50
EVENTS = ("mail.", "worker.", "meeting.", "room.pulse", "task.")
"""Events that can change what needs someone."""


@dataclass(frozen=True)
class Need:
    """One thing that needs the viewer: ``key`` is stable while it stays (a browser notifies
    each key once)."""

    key: str
    what: str
    title: str
    href: str
    since: datetime | None


async def _blockers(hub: Hub, viewer: Principal) -> list[Need]:
    if viewer.kind != "human":
        return []
    flt = InboxFilter(kind="blocker", status=list(OPEN_MAIL), limit=SHOWN)
    rows = (await hub.mail.inbox_page(viewer, viewer.id, flt)).rows
    return [
        Need(
            f"mail:{m.id}",
            "blocker",
            f"{m.from_id}: {m.subject or '(no subject)'}",
            f"{PREFIX}/mail/thread/{m.id}",
            m.created,
        )
        for m in rows
    ]


async def _escalations(hub: Hub, viewer: Principal) -> list[Need]:
    """Running meetings a stall escalated (the pulse log names them) convened as the viewer,
    or any for the operator."""
    if viewer.kind != "human":
        return []
    async with hub.store.read() as tx:
        p = tx.table("pulse_log").c
        pulses: list[Any] = await tx.select(
            "pulse_log", p.escalated.is_(True), order_by=[p.id.desc()], limit=SHOWN
        )
    escalated = {e.meeting_id: e for e in pulses if e.meeting_id}
    found = []
    for meeting in await hub.meetings.latest(viewer, SHOWN):
        if meeting.id not in escalated or meeting.status != "running":
            continue
        if not viewer.is_operator and meeting.convened_by != viewer.id:
            continue
        found.append(
            Need(
                f"meeting:{meeting.id}",
                "stall escalated",
                meeting.topic,
                f"{PREFIX}/meetings/{meeting.id}",
                meeting.created,
            )
        )
    return found


async def _workers(hub: Hub, viewer: Principal, now: datetime) -> list[Need]:
    if viewer.kind != "human":
        return []
    found = []
    for w in await hub.workers.listing(viewer, state=["failed", "interrupted"], limit=SHOWN):
        if not viewer.is_operator and w.owner != viewer.id:
            continue
        if w.state == "failed" and now - w.updated > FAILED_WITHIN:
            continue
        what = "worker failed" if w.state == "failed" else "worker waits for a resume"
        href = f"{PREFIX}/workers/{w.id}"
        found.append(Need(f"worker:{w.id}:{w.state}", what, w.agent_id, href, w.updated))
    return found


async def _turns(hub: Hub, viewer: Principal) -> list[Need]:
    """Remote turns the viewer owes (a person seated as a remote member)."""
    async with hub.store.read() as tx:
        p = tx.table("pending_turns").c
        rows: list[Any] = await tx.select(
            "pending_turns",
            p.agent_id == viewer.id,
            p.status == "pending",
            order_by=[p.created],
            limit=SHOWN,
        )
    return [
        Need(
            f"turn:{t.id}",
            "your turn",
            f"round {t.round or 1}",
            f"{PREFIX}/channels/{t.channel_id}",
            t.created,
        )
        for t in rows
    ]


async def needs(hub: Hub, viewer: Principal) -> list[Need]:
    """Everything that needs ``viewer`` now, oldest first."""
    now = hub.ctx.clock.now()
    found = [
        *await _blockers(hub, viewer),
        *await _escalations(hub, viewer),
        *await _workers(hub, viewer, now),
        *await _turns(hub, viewer),
    ]
    return sorted(found, key=lambda n: (n.since is None, n.since or now))


@router.get("/attention/live")
async def attention_live(request: Request, viewer: ViewerDep) -> EventSourceResponse:
    """The navigation's badge again whenever what needs the viewer may have changed."""
    hub = hub_of(request)

    async def render() -> str:
        return fragment("_needs_badge.html", needs=await needs(hub, viewer.principal))

    badge = Panel(
        "needs",
        Panel.key_for(viewer, "needs"),
        ("hub",),
        render,
        about_events(*EVENTS),
    )
    return live(request, viewer, panels=[badge])
