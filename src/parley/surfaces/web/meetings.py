"""Meeting rooms: the rooms with their members, convene, emergency stop, and a meeting's live
view (seed 002 §5): topic, round x/y, present / awaiting entry / absent, the growing transcript,
the moderator's decisions and fallbacks, a human's interjection, and each member's minutes once
the meeting has adjourned."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sse_starlette.sse import EventSourceResponse

from parley.core.errors import InvalidRequest, PermissionDenied
from parley.core.events import Event
from parley.core.identity import Principal
from parley.core.meetings import roll_call
from parley.core.names import short_ids
from parley.core.rooms import Meeting
from parley.service.conversations.transcripts import channel_topic
from parley.service.conversations.turns import turns_topic
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.surfaces.web import timeline
from parley.surfaces.web.auth import PREFIX, ActionDep, ViewerDep, hub_of
from parley.surfaces.web.live import Panel, Transcript, about_events, live
from parley.surfaces.web.render import attempt, fragment, older_messages, page
from parley.surfaces.web.waits import meeting_waits, pending_turns

router = APIRouter()

BACKLOG = 200
DECISIONS = ("meeting.moderator", "meeting.moderator_fallback")
ROOMS_SHOWN = 50
MEMBER_TOPICS = 50
"""Members whose remote turns a meeting page follows live."""
After = Annotated[str | None, Query(min_length=1, max_length=64)]
Before = Annotated[int, Query(ge=1, le=2**53)]


async def _rooms(hub: Hub, viewer: Principal, after: str | None) -> dict[str, Any]:
    """One page of the rooms the viewer sees, each with its members and latest meeting, and
    where the next page starts (None: the last)."""
    found = await hub.rooms.page(viewer, after=after, limit=ROOMS_SHOWN)
    rooms = []
    for room in found.rows:
        members: list[Any] = []
        meeting = None
        # An agent also sees the rooms it created; only its own room's records.
        with contextlib.suppress(PermissionDenied):
            status = await hub.meetings.status(viewer, room_id=room.id, meeting_id=None, recent=0)
            members, meeting = status.members, status.meeting
        waits = []
        if meeting is not None and meeting.status == "running":
            waits = meeting_waits(await pending_turns(hub, channel_id=meeting.channel_id), meeting)
        rooms.append({"room": room, "members": members, "meeting": meeting, "waits": waits})
    following = found.rows[-1].id if found.more and found.rows else None
    short = short_ids(r.id for r in found.rows)
    return {"rooms": rooms, "short": short, "after": after, "following": following}


async def _state(hub: Hub, viewer: Principal, meeting: Meeting) -> dict[str, Any]:
    """What the state panel shows; the caller has passed the meeting service's visibility
    check for ``meeting``."""
    async with hub.store.read() as tx:
        e = tx.table("events").c
        decisions: list[Event] = await tx.select(
            "events",
            e.subject == f"meeting:{meeting.id}",
            e.type.in_(DECISIONS),
            order_by=[e.id],
            limit=200,
        )
    minutes = await hub.meetings.minutes(viewer, meeting.id) if meeting.status != "running" else []
    turns = (
        await pending_turns(hub, channel_id=meeting.channel_id)
        if meeting.status == "running"
        else []
    )
    return {
        "meeting": meeting,
        "roll": roll_call(meeting),
        "decisions": decisions,
        "minutes": minutes,
        "waits": meeting_waits(turns, meeting),
    }


@router.get("/meetings", response_class=HTMLResponse)
async def meeting_rooms(request: Request, viewer: ViewerDep, after: After = None) -> HTMLResponse:
    listed = await _rooms(hub_of(request), viewer.principal, after)
    return page(request, viewer, "rooms.html", **listed)


@router.get("/meetings/live")
async def meeting_rooms_live(
    request: Request, viewer: ViewerDep, after: After = None
) -> EventSourceResponse:
    """The page of rooms again when a room, a member or a meeting changes."""
    hub = hub_of(request)

    async def render() -> str:
        return fragment("_rooms.html", **await _rooms(hub, viewer.principal, after))

    relevant = about_events("room.", "meeting.")
    key = Panel.key_for(viewer, "rooms", after)
    return live(request, viewer, panels=[Panel("rooms", key, ("hub",), render, relevant)])


@router.get("/meetings/{meeting_id}/timeline", response_class=HTMLResponse)
async def meeting_timeline(request: Request, viewer: ViewerDep, meeting_id: str) -> HTMLResponse:
    """A meeting's speeches on a time axis, each with the durations the hub recorded."""
    hub = hub_of(request)
    meeting = await hub.meetings.get(viewer.principal, meeting_id)
    speeches = await hub.meetings.speeches(viewer.principal, meeting_id)
    bars, axis_ms = timeline.bars(speeches)
    return page(
        request,
        viewer,
        "meeting_timeline.html",
        meeting=meeting,
        bars=bars,
        axis_ms=axis_ms,
        parts=timeline.PARTS,
    )


@router.get("/meetings/{meeting_id}", response_class=HTMLResponse)
async def meeting_view(request: Request, viewer: ViewerDep, meeting_id: str) -> HTMLResponse:
    hub = hub_of(request)
    meeting = await hub.meetings.get(viewer.principal, meeting_id)
    messages = (await hub.meetings.transcript(viewer.principal, meeting_id, latest=BACKLOG)).rows
    return page(
        request,
        viewer,
        "meeting.html",
        messages=messages,
        after=messages[-1].seq if messages else 0,
        csrf_token=viewer.session.csrf,
        **await _state(hub, viewer.principal, meeting),
    )


@router.get("/meetings/{meeting_id}/live")
async def meeting_live(
    request: Request, viewer: ViewerDep, meeting_id: str, after: int = 0
) -> EventSourceResponse:
    hub = hub_of(request)
    meeting = await hub.meetings.get(viewer.principal, meeting_id)
    topic = channel_topic(meeting.channel_id)
    subject = f"meeting:{meeting_id}"

    async def backfill(after_seq: int) -> list[dict[str, Any]]:
        page_ = await hub.meetings.transcript(
            viewer.principal, meeting_id, after_seq=after_seq, limit=BACKLOG
        )
        return [m.model_dump(mode="json") for m in page_.rows]

    async def recheck(principal: Principal) -> object:
        return await hub.meetings.get(principal, meeting_id)

    async def render_state() -> str:
        current = await hub.meetings.get(viewer.principal, meeting_id)
        state = await _state(hub, viewer.principal, current)
        return fragment("_meeting_state.html", **state)

    def changed(item: dict[str, Any]) -> bool:
        return item.get("type") in ("meeting", "message", "turn") or (
            item.get("type") == "event" and item["event"].get("subject") == subject
        )

    async def render_actions() -> str:
        current = await hub.meetings.get(viewer.principal, meeting_id)
        return fragment(
            "_meeting_actions.html",
            meeting=current,
            viewer=viewer.principal,
            csrf=viewer.session.csrf,
        )

    transcript = Transcript(("meeting", meeting_id), topic, backfill, recheck)
    # A remote member's turn is announced on its own topic: the state shows whom the meeting
    # waits for as soon as the turn is offered.
    turn_topics = tuple(turns_topic(a.agent_id) for a in meeting.attendees[:MEMBER_TOPICS])
    state = Panel(
        "state",
        Panel.key_for(viewer, "meeting", meeting_id),
        (topic, "hub", *turn_topics),
        render_state,
        changed,
    )
    # The forms follow the meeting: gone once it has adjourned (they carry the CSRF token).
    actions = Panel(
        "actions",
        Panel.key_for(viewer, "meeting-actions", meeting_id, session=True),
        (topic, "hub"),
        render_actions,
        changed,
    )
    return live(request, viewer, panels=[state, actions], transcript=transcript, after=after)


@router.get("/meetings/{meeting_id}/older", response_class=HTMLResponse)
async def meeting_older(
    request: Request, viewer: ViewerDep, meeting_id: str, before: Before
) -> HTMLResponse:
    """The page of the meeting's messages before ``before`` (the transcript's first)."""
    hub = hub_of(request)

    async def read(after_seq: int, limit: int) -> list[Any]:
        found = await hub.meetings.transcript(
            viewer.principal, meeting_id, after_seq=after_seq, limit=limit
        )
        return list(found.rows)

    return await older_messages(read, before)


@router.post("/meetings/convene")
async def convene(request: Request, action: ActionDep) -> RedirectResponse:
    """Convene in the room the form names, as the signed-in principal; a human convenes as the
    room's human seat."""
    viewer, form = action
    hub = hub_of(request)

    async def run() -> Meeting:
        spec = ConveneSpec(topic=form.get("topic", ""))
        return await hub.meetings.convene(viewer.principal, form.get("room_id", ""), spec)

    return await attempt(
        viewer,
        run,
        "Meeting convened.",
        f"{PREFIX}/meetings",
        then=lambda meeting: f"{PREFIX}/meetings/{meeting.id}",
    )


@router.post("/meetings/{meeting_id}/post")
async def interject(request: Request, action: ActionDep, meeting_id: str) -> RedirectResponse:
    """A human speaks into the running meeting without taking a turn."""
    viewer, form = action
    hub = hub_of(request)
    content = form.get("content", "")
    return await attempt(
        viewer,
        lambda: hub.meetings.post(viewer.principal, meeting_id, content),
        "Said in the meeting.",
        f"{PREFIX}/meetings/{meeting_id}",
    )


@router.post("/meetings/stop")
async def emergency_stop(request: Request, action: ActionDep) -> RedirectResponse:
    """The emergency stop: every running meeting the viewer may stop, once it is confirmed (a
    person on one meeting's page means that meeting); answers once they have ended."""
    viewer, form = action
    hub = hub_of(request)
    where = form.get("back", "")
    if not where.startswith(f"{PREFIX}/meetings"):
        where = f"{PREFIX}/meetings"  # only ever back to a meetings page of this UI

    async def run() -> object:
        if form.get("confirm") != "every-meeting":
            raise InvalidRequest(
                "the emergency stop ends every running meeting you may stop; tick the "
                "confirmation to mean it, or stop just this meeting",
                code="confirmation_required",
            )
        return await hub.meetings.stop(viewer.principal)

    return await attempt(viewer, run, "Every running meeting stopped.", where)


@router.post("/meetings/{meeting_id}/stop")
async def stop_meeting(request: Request, action: ActionDep, meeting_id: str) -> RedirectResponse:
    """Stop this one meeting; answers once it has ended."""
    viewer, _form = action
    hub = hub_of(request)
    return await attempt(
        viewer,
        lambda: hub.meetings.stop_meeting(viewer.principal, meeting_id),
        "Meeting stopped.",
        f"{PREFIX}/meetings/{meeting_id}",
    )
