"""Meeting-room tools (R1–R10): joining and leaving a room, convening, a meeting's status, the
emergency stop, briefs and the done mark. The descriptions carry the rules the hub enforces
(source 002 §5.7: the tool is the button and its description is the manual).

A member's meeting turns are not tools of their own: they arrive through ``wait_for_turn`` and
are answered with ``speak``, like any remote agent's turn, and a meeting turn itself offers no
tools (R3).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from parley.core.channels import ChannelMessage
from parley.core.errors import InvalidRequest, PermissionDenied
from parley.core.meetings import roll_call
from parley.core.rooms import DEFAULT_SPEECH_LIMIT, DEFAULT_SPEECH_TARGET, Meeting, RoomConfig
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import MemberView
from parley.service.tools.registry import ToolCall, agent_tool, without_empty

_DEFAULTS = RoomConfig()
RECENT_MAX = 20
# A status is a view, not the record: one long human interjection must not flood it.
RECENT_CHARS = 2000

JOIN_ROOM = """\
Join a meeting room with your main session. Membership is the permission boundary: only \
members convene or are summoned, and joining is your consent to attend every meeting you are \
summoned to. One room per agent: leave it first (room_membership_exclusive). Refused while you \
have a turn in flight (member_busy) or are in a meeting (member_in_meeting). Once summoned, \
your meeting turns come through wait_for_turn: answer each with speak."""

LEAVE_ROOM = """\
Leave your room (room_id defaults to it). Refused while you are in a meeting \
(member_in_meeting) or have a turn in flight (member_busy)."""

CONVENE = f"""\
Convene a meeting of your room on topic, summoning every member (or those in members). Idle or \
done members enter at once, working ones when their turn ends. Refused, nobody summoned, if \
you are not a member (not_a_room_member), a meeting is running (meeting_already_running) or \
nobody can enter (nobody_can_enter). The moderator gives the floor in rounds. Speeches have a \
hard limit (speech_limit, default {DEFAULT_SPEECH_LIMIT} characters; aim for about \
{DEFAULT_SPEECH_TARGET}): a longer one is not posted and the turn is asked again. Afterwards \
each member writes its own minutes in one more turn."""

MEETING_STATUS = """\
A meeting: meeting_id, else your room's running (or latest) meeting. Topic, round x/y, \
present/awaiting/absent members, the last `recent` transcript messages, end_reason once it has \
ended; also your room's members and their states. You see only your own room."""

STOP_MEETING = """\
Stop a meeting. With meeting_id: stops that meeting only (one of your room's). Without: the \
emergency stop, no room id needed: stops every running meeting you may stop (yours: your \
room's). Returns them once they have ended (end_reason stopped). A stopped meeting gets no \
minutes."""

POST_BRIEF = f"""\
Post a short brief to your room's board: what you are doing, where you stand. At most the \
room's brief_max_chars (default {_DEFAULTS.brief_max_chars}): a longer one is rejected, not \
truncated (brief_too_long). Only your latest few briefs are kept (briefs_kept, default \
{_DEFAULTS.briefs_kept})."""

MARK_DONE = """\
Set your activity state in your room: done (done=false: idle again). A done member enters a \
meeting at once and is done again after it; working is observed by the hub, never declared. \
Refused outside a room (not_a_room_member) or in a meeting (member_in_meeting)."""


def member_view(view: MemberView) -> dict[str, Any]:
    return without_empty(
        {
            "agent_id": view.agent_id,
            "room_id": view.room_id,
            "session_id": view.session_id,
            "state": view.state,
            "meeting_id": view.meeting_id,
        }
    )


def meeting_view(meeting: Meeting) -> dict[str, Any]:
    """A meeting as an agent reads it: round x/y and who is present, awaited or absent."""
    roll = roll_call(meeting)
    return without_empty(
        {
            "meeting_id": meeting.id,
            "room_id": meeting.room_id,
            "channel_id": meeting.channel_id,
            "topic": meeting.topic,
            "convened_by": meeting.convened_by,
            "status": meeting.status,
            "round": f"{roll.round}/{meeting.max_rounds}",
            "speeches": meeting.speeches,
            "present": roll.present,
            "awaiting": roll.awaiting,
            "absent": roll.absent,
            "end_reason": meeting.end_reason,
            "error": meeting.error,
        }
    )


def recent_view(msg: ChannelMessage) -> dict[str, Any]:
    text = msg.content
    clipped = len(text) > RECENT_CHARS
    return without_empty(
        {
            "seq": msg.seq,
            "speaker": msg.sender_id,
            "kind": msg.sender_kind,
            "round": msg.round,
            "text": text[:RECENT_CHARS] + "…" if clipped else text,
            "clipped": clipped or None,
        }
    )


async def own_room(call: ToolCall, action: str, argument: str = "room_id") -> str:
    """The caller's room: an agent belongs to at most one, so it need not name it."""
    caller = call.caller
    if caller.kind != "agent":
        raise InvalidRequest(
            f"{caller.id!r} belongs to no room; pass {argument} to {action}",
            code=f"{argument}_required",
        )
    room = await call.hub.rooms.room_of(caller)
    if room is None:
        raise PermissionDenied(
            f"{caller.id!r} is in no room and may not {action}; join_room first",
            code="not_a_room_member",
        )
    return room.id


@agent_tool(JOIN_ROOM)
async def join_room(
    call: ToolCall,
    room_id: Annotated[str, Field(min_length=1, max_length=64, description="room id or name")],
) -> dict[str, Any]:
    view = await call.hub.rooms.join(call.caller, room_id, call.caller.id)
    return member_view(view)


@agent_tool(LEAVE_ROOM)
async def leave_room(
    call: ToolCall,
    room_id: Annotated[str | None, Field(max_length=64, description="default: your room")] = None,
) -> dict[str, Any]:
    room = room_id or await own_room(call, "leave it")
    await call.hub.rooms.leave(call.caller, room, call.caller.id)
    return {"left": room}


@agent_tool(CONVENE)
async def convene(
    call: ToolCall,
    topic: Annotated[str, Field(min_length=1, max_length=2000, description="what to settle")],
    room_id: Annotated[str | None, Field(max_length=64, description="default: your room")] = None,
    members: Annotated[
        list[str] | None, Field(max_length=200, description="default: every member")
    ] = None,
) -> dict[str, Any]:
    room = room_id or await own_room(call, "convene")
    spec = ConveneSpec(topic=topic, members=members)
    return meeting_view(await call.hub.meetings.convene(call.caller, room, spec))


@agent_tool(MEETING_STATUS)
async def meeting_status(
    call: ToolCall,
    meeting_id: Annotated[
        str | None, Field(max_length=64, description="default: your room's meeting")
    ] = None,
    recent: Annotated[int, Field(ge=0, le=RECENT_MAX, description="transcript messages")] = 5,
) -> dict[str, Any]:
    room_id = None if meeting_id else await own_room(call, "see a meeting", "meeting_id")
    found = await call.hub.meetings.status(
        call.caller, room_id=room_id, meeting_id=meeting_id, recent=recent
    )
    view = None
    if found.meeting is not None:
        view = meeting_view(found.meeting)
        if recent:
            view["recent"] = [recent_view(m) for m in found.recent]
    return {
        "room": {
            "id": found.room_id,
            "members": [{"agent_id": m.agent_id, "state": m.state} for m in found.members],
        },
        "meeting": view,
    }


@agent_tool(STOP_MEETING)
async def stop_meeting(
    call: ToolCall,
    meeting_id: Annotated[
        str | None,
        Field(max_length=64, description="just this meeting; default: the emergency stop"),
    ] = None,
) -> dict[str, Any]:
    if meeting_id is not None:
        meetings = [await call.hub.meetings.stop_meeting(call.caller, meeting_id)]
    else:
        meetings = await call.hub.meetings.stop(call.caller)
    stopped = [meeting_view(m) for m in meetings]
    return {"stopped": stopped, "count": len(stopped), "emergency": meeting_id is None}


@agent_tool(POST_BRIEF)
async def post_brief(
    call: ToolCall,
    text: Annotated[str, Field(min_length=1, description="your brief")],
) -> dict[str, Any]:
    brief = await call.hub.rooms.post_brief(call.caller, text)
    return {
        "id": brief.id,
        "room_id": brief.room_id,
        "chars": len(brief.text),
        "created": brief.created.isoformat(),
    }


@agent_tool(MARK_DONE)
async def mark_done(
    call: ToolCall,
    done: Annotated[bool, Field(description="false: not done any more")] = True,
) -> dict[str, Any]:
    return member_view(await call.hub.rooms.mark_done(call.caller, done=done))


TOOLS = (
    join_room,
    leave_room,
    convene,
    meeting_status,
    stop_meeting,
    post_brief,
    mark_done,
)
