"""One turn of a task, opened from its timeline: the transcript window its prompt was built from
and the message it committed, secrets redacted. Whoever may read the task's channel may open a
turn of it, except an agent, which opens only its own turns."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from parley.core.channels import ChannelMessage, Invocation
from parley.core.errors import NotFound, PermissionDenied
from parley.core.redact import redact_text
from parley.service.hub import Hub
from parley.surfaces.web.auth import ViewerDep, hub_of
from parley.surfaces.web.render import page
from parley.surfaces.web.timeline import PARTS, _parts_ms

router = APIRouter()

WINDOW_MAX = 500


async def _messages(
    hub: Hub, inv: Invocation
) -> tuple[list[ChannelMessage], ChannelMessage | None]:
    async with hub.store.read() as tx:
        cm = tx.table("channel_messages").c
        first = (
            await tx.get("channel_messages", inv.prompt_first_id) if inv.prompt_first_id else None
        )
        last = await tx.get("channel_messages", inv.prompt_last_id) if inv.prompt_last_id else None
        window: list[ChannelMessage] = []
        if first is not None and last is not None:
            window = await tx.select(
                "channel_messages",
                cm.channel_id == inv.channel_id,
                cm.seq >= first.seq,
                cm.seq <= last.seq,
                order_by=[cm.seq],
                limit=WINDOW_MAX,
            )
        reply = await tx.get("channel_messages", inv.message_id) if inv.message_id else None
    return window, reply


def _redacted(m: ChannelMessage) -> ChannelMessage:
    return m.model_copy(update={"content": redact_text(m.content)})


@router.get("/tasks/{task_id}/turns/{invocation_id}", response_class=HTMLResponse)
async def turn(
    request: Request, viewer: ViewerDep, task_id: str, invocation_id: str
) -> HTMLResponse:
    hub = hub_of(request)
    task = await hub.tasks.get(viewer.principal, task_id)  # the channel's visibility rules
    found = [
        i for i in await hub.tasks.invocations(viewer.principal, task_id) if i.id == invocation_id
    ]
    if not found:
        raise NotFound(f"task {task_id} has no turn {invocation_id}")
    inv = found[0]
    who = viewer.principal
    if who.kind == "agent" and inv.agent_id != who.id:
        raise PermissionDenied(
            f"{who.id} may open only its own turns; this one is {inv.agent_id}'s"
        )
    window, reply = await _messages(hub, inv)
    parts = _parts_ms(inv.timings)
    context: dict[str, Any] = {
        "task": task,
        "inv": inv,
        "parts": [(words, parts[name]) for name, words in PARTS],
        "window": [_redacted(m) for m in window],
        "reply": _redacted(reply) if reply is not None else None,
    }
    return page(request, viewer, "turn.html", **context)
