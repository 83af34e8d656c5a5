"""Channels, discussions, group sessions (C14) and tasks."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field
from sse_starlette.sse import EventSourceResponse

from parley.core import discussion as d
from parley.core.channels import Channel, ChannelMessage, Invocation, Task
from parley.core.limits import MAX_SEQ, OptionalStorableText, StorableText
from parley.service.conversations.channels import ChannelPatch, ChannelSpec
from parley.service.conversations.transcripts import Posted, channel_topic
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES, ErrorBody
from parley.surfaces.rest.paging import NEXT_DESCRIPTION, IdWindow, SeqWindow, link_next
from parley.surfaces.rest.sse import (
    PAGE_ROWS,
    BackfillPage,
    SseItem,
    last_event_id,
    seq_position,
    stream,
)

router = APIRouter(responses=ERROR_RESPONSES)

TASKS_REPLAYED = 5
_QUOTA: dict[int | str, dict[str, Any]] = {
    429: {"model": ErrorBody, "description": "Sender quota exceeded"}
}


class PrivateChannelRequest(BaseModel):
    """create_private_channel (C3); with callbackChannelId it opens a discussion."""

    name: StorableText = Field(min_length=1, max_length=200)
    members: list[StorableText] = Field(default_factory=list, max_length=64)
    callbackChannelId: OptionalStorableText = Field(default=None, max_length=64)
    discussGuide: OptionalStorableText = Field(default=None, max_length=20_000)


class PostRequest(BaseModel):
    content: StorableText = Field(
        min_length=1, description="Markdown; bounded in bytes by the hub's message limit (413)."
    )
    reply_to: OptionalStorableText = Field(default=None, max_length=64)


class CallbackRequest(BaseModel):
    summaryPath: str = Field(min_length=1, max_length=4096)
    session_id: OptionalStorableText = Field(
        default=None,
        max_length=64,
        description=(
            "The session the call comes from: the initiator's session in the channel it opened "
            "the discussion from (initiatorSessionId) or in the discussion channel. Another "
            "session of the same agent is refused (not_initiator_session). Default: the "
            "caller's session in the discussion channel."
        ),
    )


class CloseRequest(BaseModel):
    reason: StorableText = Field(min_length=1, max_length=d.CLOSE_REASON_MAX_CHARS)


class GroupSessionRequest(BaseModel):
    """C14: a group chat with bounded multi-round discussions."""

    name: StorableText = Field(min_length=1, max_length=200)
    kind: Literal["group"] = "group"
    members: list[StorableText] = Field(default_factory=list, max_length=64)
    discussion_rounds: int = 3


# -- channels ----------------------------------------------------------------------------------
@router.post("/v1/channels", response_model=Channel, status_code=201, tags=["channels"])
async def create_channel(spec: ChannelSpec, caller: Caller, hub: HubDep) -> Channel:
    """Create a group or direct channel; the caller becomes a member."""
    return await hub.channels.create(caller, spec)


@router.post("/v1/channels/private", response_model=Channel, status_code=201, tags=["discussions"])
async def create_private_channel(
    body: PrivateChannelRequest, caller: Caller, hub: HubDep
) -> Channel:
    """A private channel; with callbackChannelId + discussGuide a moderated discussion that
    reports back to that channel."""
    return await hub.discussions.create_private_channel(
        caller, body.name, body.members, body.callbackChannelId, body.discussGuide
    )


@router.get(
    "/v1/channels",
    response_model=list[Channel],
    tags=["channels"],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def list_channels(
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[IdWindow, Depends()],
) -> list[Channel]:
    """Channels the caller is a member of or created (all, for the operator), oldest first. A
    page that does not end the list carries a ``Link`` to the next (``after``)."""
    page = await hub.channels.page(caller, after=window.after, limit=window.limit)
    return window.rows(request, response, page)


@router.get("/v1/channels/{channel_id}", response_model=Channel, tags=["channels"])
async def get_channel(channel_id: str, caller: Caller, hub: HubDep) -> Channel:
    return await hub.channels.get(caller, channel_id)


@router.patch("/v1/channels/{channel_id}", response_model=Channel, tags=["channels"])
async def update_channel(
    channel_id: str, patch: ChannelPatch, caller: Caller, hub: HubDep
) -> Channel:
    """Change members or rounds; a running discussion keeps its snapshot."""
    return await hub.channels.update(caller, channel_id, patch)


@router.delete("/v1/channels/{channel_id}", response_model=Channel, tags=["channels"])
async def delete_channel(channel_id: str, caller: Caller, hub: HubDep) -> Channel:
    """Creator or operator: delete a group or direct channel. Its running discussion ends
    (``deleted``; a late reply is refused ``room_deleted``); its messages are kept."""
    return await hub.channels.delete(caller, channel_id)


@router.get(
    "/v1/channels/{channel_id}/messages",
    response_model=list[ChannelMessage],
    tags=["channels"],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def channel_messages(
    channel_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[SeqWindow, Depends()],
) -> list[ChannelMessage]:
    """Messages in channel order, one page at a time: a page that does not end the channel
    carries a ``Link`` to the next (``after_seq``). With ``latest``, the newest ones that fit
    one page."""
    page = await hub.channels.messages_page(
        caller, channel_id, after_seq=window.after_seq, latest=window.latest, limit=window.limit
    )
    return window.rows(request, response, page.rows, page.more)


@router.post(
    "/v1/channels/{channel_id}/messages",
    response_model=Posted,
    status_code=201,
    tags=["channels"],
    responses=_QUOTA,
)
async def post_message(channel_id: str, body: PostRequest, caller: Caller, hub: HubDep) -> Posted:
    """Post as the caller; may wake an agent or start (supersede) a discussion task."""
    return await hub.channels.post(caller, channel_id, body.content, reply_to=body.reply_to)


@router.get(
    "/v1/channels/{channel_id}/stream",
    response_class=EventSourceResponse,
    tags=["streams"],
    responses={200: {"content": {"text/event-stream": {}}, "description": "Server-sent events"}},
)
async def channel_stream(
    channel_id: str, request: Request, caller: Caller, hub: HubDep, last_id: str | None = None
) -> EventSourceResponse:
    """Messages (event ``message``, id = channel seq) and task updates (event ``task``) live;
    resumable with Last-Event-ID. A caller removed from the channel, or whose channel is
    deleted, gets a last ``error`` event (its refusal) at once and the stream ends."""
    await hub.channels.get(caller, channel_id)
    after = seq_position(last_event_id(request, last_id))
    last_task_seq = {"value": 0}

    async def backfill(last: str | None) -> BackfillPage:
        after_seq = int(last) if last else 0
        async with hub.store.read() as tx:
            page = await tx.channel_page(
                channel_id,
                after_seq=after_seq,
                limit=PAGE_ROWS,
                max_bytes=hub.settings.page_max_bytes,
            )
            items = [SseItem(str(r.seq), "message", r.model_dump(mode="json")) for r in page.rows]
            last_task_seq["value"] = int(items[-1].id) if items else after_seq
            if page.more:
                return BackfillPage(items, True)
            # A watcher that joins (or resumes) late must still learn how the recent tasks
            # stand: a task may have finished before it subscribed.
            t = tx.table("tasks").c
            recent = await tx.select(
                "tasks", t.channel_id == channel_id, order_by=[t.id.desc()], limit=TASKS_REPLAYED
            )
        items += [
            SseItem(str(last_task_seq["value"]), "task", task.model_dump(mode="json"))
            for task in reversed(recent)
        ]
        return BackfillPage(items, False)

    def from_live(data: dict[str, Any]) -> SseItem | None:
        if data.get("type") == "message":
            last_task_seq["value"] = int(data["seq"])
            return SseItem(str(data["seq"]), "message", data["message"])
        if data.get("type") == "task":
            # Task updates carry the id of the last message so a resume stays in order.
            return SseItem(f"{last_task_seq['value']}", "task", data["task"])
        return None

    def order(item_id: str) -> tuple[int, int]:
        return (int(item_id), 0)

    return stream(
        request,
        hub.bus,
        [channel_topic(channel_id)],
        after=after,
        backfill=backfill,
        from_live=from_live,
        order=order,
        allow_equal=lambda item: item.event == "task",
        # A member removed (or the channel deleted) stops receiving it at once.
        recheck=lambda: hub.channels.get(caller, channel_id),
    )


# -- discussions -------------------------------------------------------------------------------
@router.post("/v1/channels/{channel_id}/callback", response_model=Channel, tags=["discussions"])
async def discuss_callback(
    channel_id: str, body: CallbackRequest, caller: Caller, hub: HubDep
) -> Channel:
    """The initiator finishes the discussion with its summary file (C8)."""
    return await hub.discussions.callback(
        caller, channel_id, body.summaryPath, session_id=body.session_id
    )


@router.post("/v1/channels/{channel_id}/close", response_model=Channel, tags=["discussions"])
async def force_close(channel_id: str, body: CloseRequest, caller: Caller, hub: HubDep) -> Channel:
    """Operator: close a discussion that will not finish (C15)."""
    return await hub.discussions.force_close(caller, channel_id, body.reason)


# -- tasks -------------------------------------------------------------------------------------
@router.get(
    "/v1/channels/{channel_id}/tasks",
    response_model=list[Task],
    tags=["tasks"],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def channel_tasks(
    channel_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[IdWindow, Depends()],
) -> list[Task]:
    """The channel's tasks, oldest first, one page at a time (``Link`` to the next)."""
    page = await hub.tasks.of_channel_page(
        caller, channel_id, after=window.after, limit=window.limit
    )
    return window.rows(request, response, page)


@router.get("/v1/tasks/{task_id}", response_model=Task, tags=["tasks"])
async def get_task(task_id: str, caller: Caller, hub: HubDep) -> Task:
    """A task with its snapshot (members, rounds), progress and end reason."""
    return await hub.tasks.get(caller, task_id)


@router.delete("/v1/tasks/{task_id}", response_model=Task, tags=["tasks"])
async def cancel_task(task_id: str, caller: Caller, hub: HubDep) -> Task:
    """Cancel a running task."""
    return await hub.tasks.cancel(caller, task_id)


@router.get("/v1/tasks/{task_id}/invocations", response_model=list[Invocation], tags=["tasks"])
async def task_invocations(task_id: str, caller: Caller, hub: HubDep) -> list[Invocation]:
    """The trace of every runtime call of a task (C13)."""
    return await hub.tasks.invocations(caller, task_id)


# -- C14 group sessions ------------------------------------------------------------------------
@router.post("/v1/im/sessions", response_model=Channel, status_code=201, tags=["groups"])
async def create_group(body: GroupSessionRequest, caller: Caller, hub: HubDep) -> Channel:
    return await hub.channels.create(
        caller,
        ChannelSpec(
            name=body.name,
            kind="group",
            members=body.members,
            discussion_rounds=body.discussion_rounds,
        ),
    )


@router.get(
    "/v1/im/sessions",
    response_model=list[Channel],
    tags=["groups"],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def list_groups(
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[IdWindow, Depends()],
) -> list[Channel]:
    """The group channels of ``GET /v1/channels``, one page at a time."""
    page = await hub.channels.page(caller, after=window.after, limit=window.limit, kinds=("group",))
    return window.rows(request, response, page)


@router.get("/v1/im/sessions/{channel_id}", response_model=Channel, tags=["groups"])
async def get_group(channel_id: str, caller: Caller, hub: HubDep) -> Channel:
    return await hub.channels.get(caller, channel_id)


@router.patch("/v1/im/sessions/{channel_id}", response_model=Channel, tags=["groups"])
async def update_group(
    channel_id: str, patch: ChannelPatch, caller: Caller, hub: HubDep
) -> Channel:
    """Creator or operator: change members or discussion_rounds. The running discussion keeps
    the snapshot it started with; the next one uses the new settings (C12). Agents added must
    have consented to the caller."""
    return await hub.channels.update(caller, channel_id, patch)


@router.delete("/v1/im/sessions/{channel_id}", response_model=Channel, tags=["groups"])
async def delete_group(channel_id: str, caller: Caller, hub: HubDep) -> Channel:
    """Creator or operator: delete the group (source 003's room deletion); see
    ``DELETE /v1/channels/{id}``."""
    return await hub.channels.delete(caller, channel_id)


@router.post(
    "/v1/im/sessions/{channel_id}/messages",
    response_model=Posted,
    status_code=201,
    tags=["groups"],
    responses=_QUOTA,
)
async def post_group(channel_id: str, body: PostRequest, caller: Caller, hub: HubDep) -> Posted:
    """Starts a discussion, or supersedes the running one."""
    return await hub.channels.post(caller, channel_id, body.content, reply_to=body.reply_to)


@router.get(
    "/v1/im/sessions/{channel_id}/messages",
    response_model=list[ChannelMessage],
    tags=["groups"],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def group_messages(
    channel_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    after_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> list[ChannelMessage]:
    """Messages in order, one page at a time (see ``GET /v1/channels/{id}/messages``)."""
    page = await hub.channels.messages_page(caller, channel_id, after_seq=after_seq, limit=limit)
    if page.rows:
        link_next(request, response, page.more, after_seq=page.rows[-1].seq)
    return page.rows


@router.get(
    "/v1/im/sessions/{channel_id}/tasks",
    response_model=list[Task],
    tags=["groups"],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def group_tasks(
    channel_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[IdWindow, Depends()],
) -> list[Task]:
    """The group's tasks, one page at a time (see ``GET /v1/channels/{id}/tasks``)."""
    page = await hub.tasks.of_channel_page(
        caller, channel_id, after=window.after, limit=window.limit
    )
    return window.rows(request, response, page)
