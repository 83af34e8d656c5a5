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
from parley.surfaces.web.waits import worker_wait

router = APIRouter()

TAKEOVER_EVENTS = (
    "system.takeover_initiated",
    "system.takeover_held",
    "system.takeover_redelivered",
    "system.takeover_consumed",
)


TASK_CHARS = 160
"""How much of a worker's task a list or tree shows (the worker's page shows it whole)."""


async def task_texts(hub: Hub, workers: list[Worker]) -> dict[str, str]:
    """Each worker's task as given: a spawned child's dispatch, a root worker's first turn.
    The caller may see these workers (the workers service said so); their tasks come with
    them."""
    dispatched = {w.dispatch_message_id: w.id for w in workers if w.dispatch_message_id}
    roots = {w.channel_id: w.id for w in workers if not w.dispatch_message_id}
    found: dict[str, str] = {}
    async with hub.store.read() as tx:
        if dispatched:
            m = tx.table("messages").c
            for mail in await tx.select("messages", m.id.in_(list(dispatched))):
                found[dispatched[mail.id]] = mail.body
        if roots:
            c = tx.table("channel_messages").c
            rows = await tx.select("channel_messages", c.channel_id.in_(list(roots)), c.seq == 1)
            for row in rows:
                found[roots[row.channel_id]] = row.content
    return found


def short(text: str, limit: int = TASK_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def _rows(hub: Hub, workers: list[Worker]) -> list[dict[str, Any]]:
    """The workers as the list shows them: each with its task, age, last activity and wait."""
    tasks = await task_texts(hub, workers)
    now = hub.ctx.clock.now()
    return [
        {
            "worker": w,
            "task": short(tasks.get(w.id, "")),
            "age_s": (now - w.created).total_seconds(),
            "active_s": (now - max(w.updated, w.last_heartbeat)).total_seconds(),
            "wait": worker_wait(w),
        }
        for w in workers
    ]


async def _listing(hub: Hub, viewer: Principal) -> dict[str, Any]:
    workers = await hub.workers.listing(viewer)
    parents = await _parents(hub, viewer, workers)
    return {"rows": await _rows(hub, workers), "visible_parents": parents}


async def _parents(hub: Hub, viewer: Principal, workers: list[Worker]) -> set[str]:
    """The parents of ``workers`` the viewer may open: a child's agent sees its own worker and
    not always the one above it, whose page would answer 404 (the list shows its id unlinked)."""
    listed = {w.id for w in workers}
    parents = {w.parent_worker_id for w in workers if w.parent_worker_id}
    if viewer.is_operator:
        return parents
    visible = parents & listed
    for parent in parents - listed:
        with contextlib.suppress(ParleyError):
            visible.add((await hub.workers.get(viewer, parent)).id)
    return visible


async def _detail(hub: Hub, viewer: Principal, worker_id: str) -> dict[str, Any]:
    """A worker, its tree and its takeover events; the workers service decides visibility."""
    worker = await hub.workers.get(viewer, worker_id)
    tree = await hub.workers.tree(viewer, worker_id)
    ids = [node["id"] for node, _ in wk.walk(tree)]
    async with hub.store.read() as tx:
        w = tx.table("workers").c
        in_tree: list[Worker] = await tx.select("workers", w.id.in_(ids))
    about = {row["worker"].id: row for row in await _rows(hub, in_tree)}
    own_task = (await task_texts(hub, [worker])).get(worker.id, "")
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
        "task": own_task,
        "wait": worker_wait(worker),
        "tree_rows": tree_rows(tree),
        "about": about,
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
    agents = (
        [a.id for a in await hub.identity.list("agent")] if viewer.principal.is_operator else []
    )
    listed = await _listing(hub, viewer.principal)
    return page(request, viewer, "workers.html", agents=agents, **listed)


@router.get("/workers/live")
async def worker_list_live(request: Request, viewer: ViewerDep) -> EventSourceResponse:
    """The worker table again whenever a worker changes."""
    hub = hub_of(request)

    async def render() -> str:
        return fragment("_workers.html", **await _listing(hub, viewer.principal))

    key = Panel.key_for(viewer, "workers")
    return live(request, viewer, panels=[Panel("workers", key, (WORKERS_TOPIC,), render)])


async def _agents(hub: Hub) -> list[str]:
    return [a.id for a in await hub.identity.list("agent") if a.active]


@router.get("/workers/{worker_id}", response_class=HTMLResponse)
async def worker_view(request: Request, viewer: ViewerDep, worker_id: str) -> HTMLResponse:
    hub = hub_of(request)
    data = await _detail(hub, viewer.principal, worker_id)
    return page(request, viewer, "worker.html", agents=await _agents(hub), **data)


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

    async def render_actions() -> str:
        current = await hub.workers.get(viewer.principal, worker_id)
        return fragment(
            "_worker_actions.html",
            worker=current,
            agents=await _agents(hub),
            csrf=viewer.session.csrf,
        )

    key = Panel.key_for(viewer, "worker", worker_id)
    worker = Panel("worker", key, (WORKERS_TOPIC, "hub"), render, changed)
    # The forms follow the worker's state: gone once it has ended (they carry the CSRF token).
    actions = Panel(
        "actions",
        Panel.key_for(viewer, "worker-actions", worker_id, session=True),
        (WORKERS_TOPIC,),
        render_actions,
    )
    return live(request, viewer, panels=[worker, actions])


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
        spec = SpawnSpec(
            prompt=form.get("prompt", ""),
            agent_id=form.get("agent_id") or None,
            block_parent=form.get("block_parent") == "on",
            independent=form.get("independent") == "on",
        )
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


@router.post("/workers/{worker_id}/resume")
async def resume(request: Request, action: ActionDep, worker_id: str) -> RedirectResponse:
    """Resume an interrupted, stale or idle worker, with a note for its next turn."""
    viewer, form = action
    hub = hub_of(request)
    note = form.get("note", "").strip()
    return await attempt(
        viewer,
        lambda: hub.workers.resume(viewer.principal, worker_id, note),
        "Worker resumed.",
        f"{PREFIX}/workers/{worker_id}",
    )


@router.post("/workers/{worker_id}/release")
async def release(request: Request, action: ActionDep, worker_id: str) -> RedirectResponse:
    """Let an idle or stale worker go for good."""
    viewer, _ = action
    hub = hub_of(request)
    return await attempt(
        viewer,
        lambda: hub.workers.release(viewer.principal, worker_id),
        "Worker released.",
        f"{PREFIX}/workers/{worker_id}",
    )
