"""Channels: the list, a live transcript with its task panel and invocation trace (C13), and
the actions on them — post as a human, cancel a task, force-close a discussion."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sse_starlette.sse import EventSourceResponse

from parley.core.channels import Task
from parley.core.identity import Principal
from parley.core.names import short_ids
from parley.service.conversations.transcripts import channel_topic
from parley.service.conversations.turns import turns_topic
from parley.service.hub import Hub
from parley.surfaces.web import timeline
from parley.surfaces.web.auth import PREFIX, ActionDep, ViewerDep, hub_of
from parley.surfaces.web.live import Panel, Transcript, about_events, live
from parley.surfaces.web.render import attempt, fragment, older_messages, page
from parley.surfaces.web.waits import discussion_wait, task_waits

router = APIRouter()

BACKLOG = 200
TASKS_SHOWN = 5
MEMBER_TOPICS = 50
"""Members whose remote turns a channel page follows live (a bigger channel's show on its next
change)."""
CHANNELS_SHOWN = 100
After = Annotated[str | None, Query(min_length=1, max_length=64)]
Before = Annotated[int, Query(ge=1, le=2**53)]


async def _tasks(hub: Hub, viewer: Principal, channel_id: str) -> dict[str, Any]:
    """The task panel: the newest tasks first, each with its snapshot, round x/y, end reason and
    what it waits for, and what the channel waits for (a discussion's summary) or why it was
    closed."""
    channel = await hub.channels.get(viewer, channel_id)
    tasks: list[Task] = await hub.tasks.latest_of_channel(viewer, channel_id, TASKS_SHOWN)
    return {
        "channel": channel,
        "tasks": tasks,
        "waits": await task_waits(hub, tasks),
        "channel_wait": discussion_wait(hub, channel, tasks),
    }


async def _channels(hub: Hub, viewer: Principal, after: str | None) -> dict[str, Any]:
    """One page of the viewer's channels, and where the next one starts (None: the last)."""
    found = await hub.channels.page(viewer, after=after, limit=CHANNELS_SHOWN)
    following = found.rows[-1].id if found.more and found.rows else None
    short = short_ids(c.id for c in found.rows)
    return {"channels": found.rows, "short": short, "after": after, "following": following}


@router.get("/channels", response_class=HTMLResponse)
async def channel_list(request: Request, viewer: ViewerDep, after: After = None) -> HTMLResponse:
    listed = await _channels(hub_of(request), viewer.principal, after)
    return page(request, viewer, "channels.html", **listed)


@router.get("/channels/live")
async def channel_list_live(
    request: Request, viewer: ViewerDep, after: After = None
) -> EventSourceResponse:
    """The page of the channel list again when a channel is created, changed or gets a
    message."""
    hub = hub_of(request)

    async def render() -> str:
        return fragment("_channels.html", **await _channels(hub, viewer.principal, after))

    relevant = about_events("channel.", "discussion.")
    key = Panel.key_for(viewer, "channels", after)
    return live(request, viewer, panels=[Panel("channels", key, ("hub",), render, relevant)])


@router.get("/channels/{channel_id}", response_class=HTMLResponse)
async def channel_view(request: Request, viewer: ViewerDep, channel_id: str) -> HTMLResponse:
    hub = hub_of(request)
    messages = await hub.channels.messages(viewer.principal, channel_id, latest=BACKLOG)
    return page(
        request,
        viewer,
        "channel.html",
        messages=messages,
        after=messages[-1].seq if messages else 0,
        **await _tasks(hub, viewer.principal, channel_id),
    )


@router.get("/channels/{channel_id}/live")
async def channel_live(
    request: Request, viewer: ViewerDep, channel_id: str, after: int = 0
) -> EventSourceResponse:
    """Messages after ``after`` (the page's last), then each new one as it is appended, and the
    task panel again whenever a task changes. A browser that reconnects sends Last-Event-ID (the
    last message's seq) and gets what it missed."""
    hub = hub_of(request)
    channel = await hub.channels.get(viewer.principal, channel_id)
    topic = channel_topic(channel_id)
    # A remote member's turn is announced on its own topic: the task panel shows whom it waits
    # for as soon as it is offered.
    turn_topics = tuple(turns_topic(m) for m in channel.members[:MEMBER_TOPICS])

    async def backfill(after_seq: int) -> list[dict[str, Any]]:
        rows = await hub.channels.messages(
            viewer.principal, channel_id, after_seq=after_seq, limit=BACKLOG
        )
        return [m.model_dump(mode="json") for m in rows]

    async def recheck(principal: Principal) -> object:
        return await hub.channels.get(principal, channel_id)

    async def render_tasks() -> str:
        shown = await _tasks(hub, viewer.principal, channel_id)
        return fragment("_tasks.html", **shown, csrf=viewer.session.csrf)

    async def render_actions() -> str:
        channel = await hub.channels.get(viewer.principal, channel_id)
        return fragment(
            "_channel_actions.html",
            channel=channel,
            viewer=viewer.principal,
            csrf=viewer.session.csrf,
        )

    subject = f"channel:{channel_id}"

    def channel_changed(item: dict[str, Any]) -> bool:
        return item.get("type") in ("task", "turn") or (
            item.get("type") == "event" and item["event"].get("subject") == subject
        )

    transcript = Transcript(("channel", channel_id), topic, backfill, recheck)
    # The task panel carries the session's CSRF token (its cancel form): shared per session.
    tasks = Panel(
        "tasks",
        Panel.key_for(viewer, "tasks", channel_id, session=True),
        (topic, "hub", *turn_topics),
        render_tasks,
        channel_changed,
    )
    # The forms follow the channel: gone once it is closed (the page need not be reloaded).
    actions = Panel(
        "actions",
        Panel.key_for(viewer, "channel-actions", channel_id, session=True),
        (topic, "hub"),
        render_actions,
        channel_changed,
    )
    return live(request, viewer, panels=[tasks, actions], transcript=transcript, after=after)


@router.get("/channels/{channel_id}/older", response_class=HTMLResponse)
async def channel_older(
    request: Request, viewer: ViewerDep, channel_id: str, before: Before
) -> HTMLResponse:
    """The page of messages before ``before`` (the transcript's first), oldest first."""
    hub = hub_of(request)

    async def read(after_seq: int, limit: int) -> list[Any]:
        return await hub.channels.messages(
            viewer.principal, channel_id, after_seq=after_seq, limit=limit
        )

    return await older_messages(read, before)


@router.get("/tasks/{task_id}/trace", response_class=HTMLResponse)
async def task_trace(request: Request, viewer: ViewerDep, task_id: str) -> HTMLResponse:
    """The invocation trace of a task (C13): every runtime call with its outcome and reason,
    and its turns as bars on a time axis."""
    hub = hub_of(request)
    task = await hub.tasks.get(viewer.principal, task_id)
    invocations = await hub.tasks.invocations(viewer.principal, task_id)
    bars, axis_ms = timeline.bars(invocations)
    return page(
        request,
        viewer,
        "trace.html",
        task=task,
        invocations=invocations,
        bars=bars,
        axis_ms=axis_ms,
        parts=timeline.PARTS,
    )


@router.post("/channels/{channel_id}/post")
async def post_message(request: Request, action: ActionDep, channel_id: str) -> RedirectResponse:
    """Post as the signed-in principal; in a group or discussion it supersedes the running
    task (C10)."""
    viewer, form = action
    hub = hub_of(request)
    content = form.get("content", "")
    return await attempt(
        viewer,
        lambda: hub.channels.post(viewer.principal, channel_id, content),
        "Posted.",
        f"{PREFIX}/channels/{channel_id}",
    )


@router.post("/tasks/{task_id}/cancel")
async def cancel_task(request: Request, action: ActionDep, task_id: str) -> RedirectResponse:
    viewer, _ = action
    hub = hub_of(request)
    return await attempt(
        viewer,
        lambda: hub.tasks.cancel(viewer.principal, task_id),
        "Task cancelled.",
        f"{PREFIX}/channels",
        then=lambda task: f"{PREFIX}/channels/{task.channel_id}",
    )


@router.post("/channels/{channel_id}/close")
async def force_close(request: Request, action: ActionDep, channel_id: str) -> RedirectResponse:
    """C15: the operator closes a discussion that will not finish; the service refuses anyone
    else (``operator_only``)."""
    viewer, form = action
    hub = hub_of(request)
    return await attempt(
        viewer,
        lambda: hub.discussions.force_close(viewer.principal, channel_id, form.get("reason", "")),
        "Discussion closed.",
        f"{PREFIX}/channels/{channel_id}",
    )
