"""Workers: the ones the viewer may see, a worker's tree (its logical session's trace) with
status colours, and spawn, cancel and takeover with an instruction, with the takeover events."""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sse_starlette.sse import EventSourceResponse

from parley.core import workers as wk
from parley.core.errors import ParleyError
from parley.core.events import Event
from parley.core.identity import Principal
from parley.core.workers import Worker
from parley.service.hub import Hub
from parley.service.workers.records import WORKERS_TOPIC, SpawnSpec, StartSpec
from parley.surfaces.web.auth import PREFIX, ActionDep, ViewerDep, hub_of
from parley.surfaces.web.live import Panel, live
from parley.surfaces.web.render import attempt, fragment, page

router = APIRouter()

TAKEOVER_EVENTS = (
    "system.takeover_initiated",
    "system.takeover_held",
    "system.takeover_redelivered",
    "system.takeover_consumed",
)


async def _detail(hub: Hub, viewer: Principal, worker_id: str) -> dict[str, Any]:
    """A worker, its tree and its takeover events; the workers service decides visibility."""
    worker = await hub.workers.get(viewer, worker_id)
    tree = await hub.workers.tree(viewer, worker_id)
    async with hub.store.read() as tx:
        e = tx.table("events").c
        takeovers: list[Event] = await tx.select(
            "events",
            e.subject == f"worker:{worker_id}",
            e.type.in_(TAKEOVER_EVENTS),
            order_by=[e.id],
            limit=100,
        )
    instructions: dict[str, str] = {}
    for event in takeovers:
        message_id = event.payload.get("message_id")
        if event.type == "system.takeover_initiated" and message_id:
            # The instruction is the takeover mail's; the mail service decides who reads it.
            with contextlib.suppress(ParleyError):
                instructions[event.id] = (await hub.mail.get(viewer, message_id)).body
    return {
        "worker": worker,
        "tree_rows": tree_rows(tree),
        "takeovers": takeovers,
        "instructions": instructions,
    }


def tree_rows(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A child tree as the rows ``_tree.html`` draws, parents before children: each node,
    whether it is a root, whether the list of its children opens after it, and otherwise how
    many lists end after its item. Flat, so that a tree of any depth draws without recursion."""
    walked = list(wk.walk(nodes))
    rows = []
    for i, (node, level) in enumerate(walked):
        after = walked[i + 1][1] if i + 1 < len(walked) else 0
        rows.append(
            {
                "node": node,
                "root": level == 0,
                "opens": after > level,
                "closes": max(0, level - after),
            }
        )
    return rows


@router.get("/workers", response_class=HTMLResponse)
async def worker_list(request: Request, viewer: ViewerDep) -> HTMLResponse:
    hub = hub_of(request)
    workers = await hub.workers.listing(viewer.principal)
    agents = (
        [a.id for a in await hub.identity.list("agent")] if viewer.principal.is_operator else []
    )
    return page(request, viewer, "workers.html", workers=workers, agents=agents)


@router.get("/workers/live")
async def worker_list_live(request: Request, viewer: ViewerDep) -> EventSourceResponse:
    """The worker table again whenever a worker changes."""
    hub = hub_of(request)

    async def render() -> str:
        workers = await hub.workers.listing(viewer.principal)
        return fragment("_workers.html", workers=workers)

    key = Panel.key_for(viewer, "workers")
    return live(request, viewer, panels=[Panel("workers", key, (WORKERS_TOPIC,), render)])


@router.get("/workers/{worker_id}", response_class=HTMLResponse)
async def worker_view(request: Request, viewer: ViewerDep, worker_id: str) -> HTMLResponse:
    data = await _detail(hub_of(request), viewer.principal, worker_id)
    return page(request, viewer, "worker.html", **data)


@router.get("/workers/{worker_id}/live")
async def worker_live(request: Request, viewer: ViewerDep, worker_id: str) -> EventSourceResponse:
    """The worker panel again whenever a worker or a takeover changes."""
    hub = hub_of(request)
    await hub.workers.get(viewer.principal, worker_id)

    async def render() -> str:
        data = await _detail(hub, viewer.principal, worker_id)
        return fragment("_worker.html", **data)

    def changed(item: dict[str, Any]) -> bool:
        return item.get("type") != "event" or item["event"].get("type") in TAKEOVER_EVENTS

    key = Panel.key_for(viewer, "worker", worker_id)
    worker = Panel("worker", key, (WORKERS_TOPIC, "hub"), render, changed)
    return live(request, viewer, panels=[worker])


@router.post("/workers/start")
async def start(request: Request, action: ActionDep) -> RedirectResponse:
    viewer, form = action
    hub = hub_of(request)

    async def run() -> Worker:
        spec = StartSpec(agent_id=form.get("agent_id") or None, prompt=form.get("prompt", ""))
        return await hub.workers.start(viewer.principal, spec)

    return await attempt(
        viewer,
        run,
        "Worker started.",
        f"{PREFIX}/workers",
        then=lambda worker: f"{PREFIX}/workers/{worker.id}",
    )


@router.post("/workers/{worker_id}/spawn")
async def spawn(request: Request, action: ActionDep, worker_id: str) -> RedirectResponse:
    viewer, form = action
    hub = hub_of(request)

    async def run() -> Worker:
        spec = SpawnSpec(prompt=form.get("prompt", ""), agent_id=form.get("agent_id") or None)
        return await hub.workers.spawn(viewer.principal, worker_id, spec)

    return await attempt(viewer, run, "Child spawned.", f"{PREFIX}/workers/{worker_id}")


@router.post("/workers/{worker_id}/cancel")
async def cancel(request: Request, action: ActionDep, worker_id: str) -> RedirectResponse:
    """Cancel the worker and its subtree (independent children excepted)."""
    viewer, form = action
    hub = hub_of(request)
    reason = form.get("reason", "").strip() or "cancelled from the web UI"
    return await attempt(
        viewer,
        lambda: hub.workers.cancel(viewer.principal, worker_id, reason=reason),
        "Worker cancelled.",
        f"{PREFIX}/workers/{worker_id}",
    )


@router.post("/workers/{worker_id}/takeover")
async def takeover(request: Request, action: ActionDep, worker_id: str) -> RedirectResponse:
    """Interrupt the worker's running turn and start its next one with the instruction (W5)."""
    viewer, form = action
    hub = hub_of(request)
    instruction = form.get("instruction", "")
    return await attempt(
        viewer,
        lambda: hub.workers.takeover(viewer.principal, worker_id, instruction),
        "Taken over.",
        f"{PREFIX}/workers/{worker_id}",
    )
