"""Meeting rooms (R1–R10): rooms and members, convening, meetings and their transcripts,
speeches and minutes, human interjections, the emergency stop, the briefing board, the pulse,
and a live stream per meeting."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field
from sse_starlette.sse import EventSourceResponse

from parley.core.channels import ChannelMessage
from parley.core.identity import Principal
from parley.core.limits import StorableText
from parley.core.meetings import roll_call
from parley.core.redact import redact_config
from parley.core.rooms import Brief, Meeting, Minutes, PulseEntry, Room, RoomConfig, Speech
from parley.service.conversations.transcripts import channel_topic
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import MemberView, RoomSpec
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES
from parley.surfaces.rest.paging import NEXT_DESCRIPTION, IdWindow, SeqWindow
from parley.surfaces.rest.sse import (
    PAGE_ROWS,
    BackfillPage,
    SseItem,
    last_event_id,
    seq_position,
    stream,
)

router = APIRouter(tags=["rooms"], responses=ERROR_RESPONSES)


class RoomOut(BaseModel):
    id: str
    name: str
    created_by: str
    created: datetime
    config: RoomConfig


def room_out(caller: Principal, room: Room) -> RoomOut:
    config = room.config
    # A moderator runtime may hold a key: nobody reads it back (the operator sees the config
    # with its secrets redacted, as an agent's runtime; others learn only its kind).
    if caller.is_operator:
        runtime = redact_config(config.moderator_runtime)
    else:
        runtime = {"kind": config.moderator_runtime.get("kind", "none")}
    config = config.model_copy(update={"moderator_runtime": runtime})
    return RoomOut(
        id=room.id, name=room.name, created_by=room.created_by, created=room.created, config=config
    )


class MemberOut(BaseModel):
    agent_id: str
    room_id: str
    session_id: str
    workspace: str | None
    state: str
    meeting_id: str | None


def member_out(caller: Principal, view: MemberView) -> MemberOut:
    # Workspaces are an agent's own business: shown to the operator and the agent itself.
    own = caller.is_operator or caller.id == view.agent_id
    return MemberOut(
        agent_id=view.agent_id,
        room_id=view.room_id,
        session_id=view.session_id,
        workspace=view.workspace if own else None,
        state=view.state,
        meeting_id=view.meeting_id,
    )


class MeetingView(BaseModel):
    """A meeting as the live view shows it: topic, round x/y, present / awaiting / absent."""

    id: str
    room_id: str
    channel_id: str
    topic: str
    convened_by: str
    moderator_route: str
    status: str
    end_reason: str | None
    error: str | None
    round: int
    max_rounds: int
    speeches: int
    present: list[str]
    awaiting: list[str]
    absent: list[str]
    created: datetime
    ended: datetime | None


def meeting_view(meeting: Meeting) -> MeetingView:
    roll = roll_call(meeting)
    return MeetingView(
        id=meeting.id,
        room_id=meeting.room_id,
        channel_id=meeting.channel_id,
        topic=meeting.topic,
        convened_by=meeting.convened_by,
        moderator_route=meeting.moderator_route,
        status=meeting.status,
        end_reason=meeting.end_reason,
        error=meeting.error,
        round=roll.round,
        max_rounds=meeting.max_rounds,
        speeches=meeting.speeches,
        present=roll.present,
        awaiting=roll.awaiting,
        absent=roll.absent,
        created=meeting.created,
        ended=meeting.ended,
    )


class JoinRequest(BaseModel):
    agent_id: StorableText = Field(min_length=1, max_length=64)
    session_id: StorableText | None = Field(default=None, max_length=64)


class DoneRequest(BaseModel):
    done: bool = True


class PostRequest(BaseModel):
    content: StorableText = Field(min_length=1)


class BriefRequest(BaseModel):
    text: StorableText = Field(min_length=1)


class PulseOut(BaseModel):
    room_id: str
    summary: str
    signals: list[dict[str, Any]]
    conclusion: str
    escalated: bool
    reason: str
    meeting_id: str | None
    logged: bool


# -- static paths first: "meetings", "stop", "done" and "briefs" are not room ids -----------------
@router.post("/v1/rooms/stop", response_model=list[MeetingView])
async def stop(caller: Caller, hub: HubDep) -> list[MeetingView]:
    """Emergency stop: no room id; stops every running meeting the caller may stop (the operator
    and humans: all; an agent: its own room's) and answers once they have ended (reason
    ``stopped``)."""
    return [meeting_view(m) for m in await hub.meetings.stop(caller)]


@router.post("/v1/rooms/done", response_model=MemberOut)
async def mark_done(body: DoneRequest, caller: Caller, hub: HubDep) -> MemberOut:
    """The calling agent marks its work done (or not): a done member enters a meeting at once
    and is done again after it."""
    return member_out(caller, await hub.rooms.mark_done(caller, done=body.done))


@router.post("/v1/rooms/briefs", response_model=Brief, status_code=201)
async def post_brief(body: BriefRequest, caller: Caller, hub: HubDep) -> Brief:
    """Post a bounded brief to the caller's room's board; the latest few per member are kept."""
    return await hub.rooms.post_brief(caller, body.text)


@router.post("/v1/rooms/meetings/{meeting_id}/stop", response_model=MeetingView)
async def stop_meeting(meeting_id: str, caller: Caller, hub: HubDep) -> MeetingView:
    """Stop this one meeting (humans and the operator: any; an agent: its own room's) and answer
    once it has ended (reason ``stopped``); 409 ``meeting_ended`` when it already had."""
    return meeting_view(await hub.meetings.stop_meeting(caller, meeting_id))


@router.get("/v1/rooms/meetings/{meeting_id}", response_model=MeetingView)
async def get_meeting(meeting_id: str, caller: Caller, hub: HubDep) -> MeetingView:
    return meeting_view(await hub.meetings.get(caller, meeting_id))


@router.get(
    "/v1/rooms/meetings/{meeting_id}/transcript",
    response_model=list[ChannelMessage],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def transcript(
    meeting_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[SeqWindow, Depends()],
) -> list[ChannelMessage]:
    """The meeting's messages in order (speeches, human interjections, moderator and system
    notes), one page at a time as a channel's: a page that does not end the transcript carries a
    ``Link`` to the next (``after_seq``). With ``latest``, the newest ones that fit one page."""
    page = await hub.meetings.transcript(
        caller, meeting_id, after_seq=window.after_seq, latest=window.latest, limit=window.limit
    )
    return window.rows(request, response, page.rows, page.more)


@router.get("/v1/rooms/meetings/{meeting_id}/speeches", response_model=list[Speech])
async def speeches(meeting_id: str, caller: Caller, hub: HubDep) -> list[Speech]:
    """Every speech attempt with its outcome and the runtime/model that produced it."""
    return await hub.meetings.speeches(caller, meeting_id)


@router.get("/v1/rooms/meetings/{meeting_id}/minutes", response_model=list[Minutes])
async def minutes(meeting_id: str, caller: Caller, hub: HubDep) -> list[Minutes]:
    """Minutes of the meeting: an agent sees its own, humans and the operator all."""
    return await hub.meetings.minutes(caller, meeting_id)


@router.post(
    "/v1/rooms/meetings/{meeting_id}/messages", response_model=ChannelMessage, status_code=201
)
async def post_message(
    meeting_id: str, body: PostRequest, caller: Caller, hub: HubDep
) -> ChannelMessage:
    """A human speaks into a running meeting without taking a turn; the next speaker sees it."""
    return await hub.meetings.post(caller, meeting_id, body.content)


@router.get(
    "/v1/rooms/meetings/{meeting_id}/stream",
    response_class=EventSourceResponse,
    tags=["streams"],
    responses={200: {"content": {"text/event-stream": {}}, "description": "Server-sent events"}},
)
async def meeting_stream(
    meeting_id: str, request: Request, caller: Caller, hub: HubDep, last_id: str | None = None
) -> EventSourceResponse:
    """The live view of a meeting: its transcript (event ``message``, id = position) and its
    state (event ``meeting``: topic, round x/y, present / awaiting / absent, end reason);
    resumable with Last-Event-ID."""
    meeting = await hub.meetings.get(caller, meeting_id)
    after = seq_position(last_event_id(request, last_id))
    last_seq = {"value": 0}

    async def backfill(last: str | None) -> BackfillPage:
        after_seq = int(last) if last else 0
        async with hub.store.read() as tx:
            page = await tx.channel_page(
                meeting.channel_id,
                after_seq=after_seq,
                limit=PAGE_ROWS,
                max_bytes=hub.settings.page_max_bytes,
            )
            # The meeting's state closes the backfill: read with its last page only.
            current = None if page.more else await tx.get("meetings", meeting_id)
        items = [SseItem(str(r.seq), "message", r.model_dump(mode="json")) for r in page.rows]
        last_seq["value"] = int(items[-1].id) if items else after_seq
        if current is not None:
            state = meeting_view(current).model_dump(mode="json")
            items.append(SseItem(str(last_seq["value"]), "meeting", state))
        return BackfillPage(items, page.more)

    def from_live(data: dict[str, Any]) -> SseItem | None:
        if data.get("type") == "message":
            last_seq["value"] = int(data["seq"])
            return SseItem(str(data["seq"]), "message", data["message"])
        if data.get("type") == "meeting":
            view = meeting_view(Meeting.model_validate(data["meeting"]))
            return SseItem(str(last_seq["value"]), "meeting", view.model_dump(mode="json"))
        return None

    return stream(
        request,
        hub.bus,
        [channel_topic(meeting.channel_id)],
        after=after,
        backfill=backfill,
        from_live=from_live,
        order=int,
        allow_equal=lambda item: item.event == "meeting",
    )


# -- rooms -----------------------------------------------------------------------------------------
@router.post("/v1/rooms", response_model=RoomOut, status_code=201)
async def create_room(body: RoomSpec, caller: Caller, hub: HubDep) -> RoomOut:
    """Create a persistent room; members join it afterwards."""
    return room_out(caller, await hub.rooms.create(caller, body))


@router.get(
    "/v1/rooms", response_model=list[RoomOut], responses={200: {"description": NEXT_DESCRIPTION}}
)
async def list_rooms(
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[IdWindow, Depends()],
) -> list[RoomOut]:
    """Rooms the caller sees, oldest first: all for humans and the operator, its own room and
    those it created for an agent. A page that does not end the list carries a ``Link`` to the
    next (``after``)."""
    page = await hub.rooms.page(caller, after=window.after, limit=window.limit)
    return [room_out(caller, r) for r in window.rows(request, response, page)]


@router.get("/v1/rooms/{room_id}", response_model=RoomOut)
async def get_room(room_id: str, caller: Caller, hub: HubDep) -> RoomOut:
    return room_out(caller, await hub.rooms.get(caller, room_id))


@router.delete("/v1/rooms/{room_id}", status_code=204)
async def delete_room(room_id: str, caller: Caller, hub: HubDep) -> Response:
    """Its creator or the operator deletes an empty room (members leave first). Its meetings
    stay on the record, readable by id; its board goes with it."""
    await hub.rooms.delete(caller, room_id)
    return Response(status_code=204)


@router.get("/v1/rooms/{room_id}/members", response_model=list[MemberOut])
async def members(room_id: str, caller: Caller, hub: HubDep) -> list[MemberOut]:
    """Members with their state now (working, idle-waiting, done, awaiting-entry, in-meeting)."""
    return [member_out(caller, v) for v in await hub.rooms.members(caller, room_id)]


@router.post("/v1/rooms/{room_id}/members", response_model=MemberOut, status_code=201)
async def join(room_id: str, body: JoinRequest, caller: Caller, hub: HubDep) -> MemberOut:
    """An agent joins (itself, or added by the operator): one room per agent, not while it
    works or is in a meeting, never with a sub-agent session."""
    view = await hub.rooms.join(caller, room_id, body.agent_id, session_id=body.session_id)
    return member_out(caller, view)


@router.delete("/v1/rooms/{room_id}/members/{agent_id}", status_code=204)
async def leave(room_id: str, agent_id: str, caller: Caller, hub: HubDep) -> Response:
    """An agent leaves (itself, or removed by the operator); not while it works or meets."""
    await hub.rooms.leave(caller, room_id, agent_id)
    return Response(status_code=204)


@router.post("/v1/rooms/{room_id}/meetings", response_model=MeetingView, status_code=201)
async def convene(room_id: str, body: ConveneSpec, caller: Caller, hub: HubDep) -> MeetingView:
    """Convene a meeting: members summon all members (or those named); humans convene as the
    human seat. Working members enter at their turn's end, idle and done ones at once."""
    return meeting_view(await hub.meetings.convene(caller, room_id, body))


@router.get(
    "/v1/rooms/{room_id}/meetings",
    response_model=list[MeetingView],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def meetings(
    room_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[IdWindow, Depends()],
) -> list[MeetingView]:
    """The room's meetings, oldest first, one page at a time (``Link`` to the next)."""
    page = await hub.meetings.of_room_page(caller, room_id, after=window.after, limit=window.limit)
    return [meeting_view(m) for m in window.rows(request, response, page)]


@router.get("/v1/rooms/{room_id}/briefs", response_model=list[Brief])
async def briefs(room_id: str, caller: Caller, hub: HubDep) -> list[Brief]:
    """The room's briefing board."""
    return await hub.rooms.board(caller, room_id)


@router.post("/v1/rooms/{room_id}/pulse", response_model=PulseOut)
async def pulse(room_id: str, caller: Caller, hub: HubDep) -> PulseOut:
    """Run the room's light tick once: broadcast the board if it changed (no model call),
    evaluate the stall signals once, escalate a stall to a meeting convened by the human seat."""
    return PulseOut.model_validate(await hub.pulse.pulse(caller, room_id), from_attributes=True)


@router.get(
    "/v1/rooms/{room_id}/pulse",
    response_model=list[PulseEntry],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def pulse_log(
    room_id: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    window: Annotated[IdWindow, Depends()],
) -> list[PulseEntry]:
    """The room's pulse log: one entry per change of conclusion, one page at a time."""
    page = await hub.pulse.log_page(caller, room_id, after=window.after, limit=window.limit)
    return window.rows(request, response, page)
