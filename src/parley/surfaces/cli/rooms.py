"""``parley room …``: meeting rooms and their members, convening and watching meetings, human
interjections, the emergency stop, minutes, and the light path (briefs, board, pulse, done)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from parley.core.names import short_ids
from parley.surfaces.cli.client import HubClient
from parley.surfaces.cli.meeting_view import MeetingScreen, names, watch_meeting
from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    ctrl_c_stops_watching,
    emit,
    emit_parts,
    fields,
    json_object,
    print_event,
    table,
    wants_json,
    when,
    when_short,
)

room_app = typer.Typer(
    help="Meeting rooms: members, meetings with a moderator, minutes, briefs and the pulse.",
    no_args_is_help=True,
)

RoomId = Annotated[
    str,
    typer.Argument(metavar="ROOM_ID", help="The room: its name, its id, or the start of its id."),
]
MeetingId = Annotated[str, typer.Argument(metavar="MEETING_ID")]
AgentArg = Annotated[
    str | None,
    typer.Argument(metavar="AGENT_ID", help="The agent (default: the caller, an agent)."),
]
Watch = Annotated[bool, typer.Option(help="Then watch the meeting live until it ends.")]


def agent_or_me(hub: HubClient, agent_id: str | None, action: str) -> str:
    """The agent named, or the caller when it is an agent (joining is the agent's own act)."""
    if agent_id:
        return agent_id
    me = hub.get("/v1/whoami")
    if me.get("kind") != "agent":
        raise typer.BadParameter(
            f"you are {me.get('id')!r}, not an agent; name the agent to {action}",
            param_hint="AGENT_ID",
        )
    return str(me["id"])


def room_config(
    raw: str | None,
    *,
    max_rounds: int | None,
    speech_limit: int | None,
    entry_boundary: str | None,
) -> dict[str, Any]:
    """A room's settings from ``--config-json`` and the common options (which win)."""
    config = json_object(raw, "--config-json") if raw else {}
    if entry_boundary is not None and entry_boundary not in ("turn_end", "immediate"):
        raise typer.BadParameter(
            f"{entry_boundary!r} is not 'turn_end' or 'immediate'", param_hint="--entry-boundary"
        )
    chosen = {
        "max_rounds": max_rounds,
        "speech_limit": speech_limit,
        "entry_boundary": entry_boundary,
    }
    config.update({k: v for k, v in chosen.items() if v is not None})
    return config


# -- rendering -------------------------------------------------------------------------------------
def render_room(r: dict[str, Any]) -> None:
    config = r.get("config") or {}
    fields(
        f"room {r['id']}",
        [
            ("name", r.get("name")),
            ("created by", r.get("created_by")),
            ("created", when(r.get("created"))),
            ("max rounds", config.get("max_rounds")),
            ("speech limit", config.get("speech_limit")),
            ("entry boundary", config.get("entry_boundary")),
            ("moderator runtime", (config.get("moderator_runtime") or {}).get("kind")),
        ],
    )


def render_members(rows: list[dict[str, Any]]) -> None:
    table(
        "members",
        ["agent", "state", "meeting", "session", "workspace"],
        [
            (
                m["agent_id"],
                m.get("state"),
                m.get("meeting_id"),
                m.get("session_id"),
                m.get("workspace"),
            )
            for m in rows
        ],
    )


def render_member(m: dict[str, Any]) -> None:
    console.print(Text(f"{m['agent_id']} is in room {m['room_id']}: {m.get('state')}"))


def meeting_rows(meetings: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            m["id"],
            m.get("topic"),
            m.get("status"),
            m.get("end_reason"),
            f"{m.get('round')}/{m.get('max_rounds')}",
            m.get("speeches"),
            names(m.get("present")),
            when_short(m.get("created")),
        )
        for m in meetings
    ]


MEETING_COLUMNS = ["id", "topic", "status", "end reason", "round", "speeches", "present", "created"]


def render_meeting(m: dict[str, Any]) -> None:
    fields(
        f"meeting {m['id']}",
        [
            ("room", m.get("room_id")),
            ("topic", m.get("topic")),
            ("convened by", m.get("convened_by")),
            ("moderator", m.get("moderator_route")),
            ("status", m.get("status")),
            ("end reason", m.get("end_reason")),
            ("error", m.get("error")),
            ("round", f"{m.get('round')}/{m.get('max_rounds')}"),
            ("speeches", m.get("speeches")),
            ("present", names(m.get("present"))),
            ("awaiting", m.get("awaiting")),
            ("absent", m.get("absent")),
            ("transcript channel", m.get("channel_id")),
            ("created", when(m.get("created"))),
            ("ended", when(m.get("ended"))),
        ],
    )


def render_speeches(rows: list[dict[str, Any]]) -> None:
    table(
        "speeches",
        ["round", "member", "attempt", "outcome", "chars", "runtime", "model", "reason"],
        [
            (
                s.get("round"),
                s.get("agent_id"),
                s.get("attempt"),
                s.get("outcome"),
                s.get("chars"),
                s.get("runtime"),
                s.get("model_route"),
                s.get("reason"),
            )
            for s in rows
        ],
    )


def render_minutes(rows: list[dict[str, Any]]) -> None:
    table(
        "minutes",
        ["member", "status", "runtime", "model", "attempts", "minutes"],
        [
            (
                m.get("agent_id"),
                m.get("status") if not m.get("reason") else f"{m['status']} ({m['reason']})",
                m.get("runtime"),
                m.get("model_route"),
                m.get("attempts"),
                m.get("text"),
            )
            for m in rows
        ],
    )


def follow(ctx: typer.Context, meeting_id: str, as_json: bool, initial: Any = None) -> None:
    screen = MeetingScreen(console, machine=wants_json(ctx, as_json))
    with ctrl_c_stops_watching():
        watch_meeting(client(ctx), meeting_id, screen, initial=initial)


# -- rooms and members -----------------------------------------------------------------------------
@room_app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The room's name.")],
    max_rounds: Annotated[
        int | None, typer.Option(help="Turns per present member before the cap (1-20).", min=1)
    ] = None,
    speech_limit: Annotated[
        int | None, typer.Option(help="Hard limit of a speech in characters.", min=1)
    ] = None,
    entry_boundary: Annotated[
        str | None,
        typer.Option(help="When a working member enters: turn_end (default) or immediate."),
    ] = None,
    config_json: Annotated[
        str | None,
        typer.Option("--config-json", help="Other room settings as JSON (see docs/meetings.md)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a persistent room; agents join it afterwards."""
    config = room_config(
        config_json, max_rounds=max_rounds, speech_limit=speech_limit, entry_boundary=entry_boundary
    )
    created = client(ctx).post("/v1/rooms", {"name": name, "config": config})
    emit(ctx, as_json, created, render_room)


@room_app.command("list")
def list_rooms(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Rooms you can see: all for humans and the operator; for an agent its own and those it
    created."""
    rooms = [r for page, _ in client(ctx).pages("/v1/rooms") for r in page]
    emit(
        ctx,
        as_json,
        rooms,
        lambda rs: table(
            "rooms",
            ["id", "name", "created by", "max rounds", "created"],
            [
                (
                    short_ids(x["id"] for x in rs)[r["id"]],
                    r.get("name"),
                    r.get("created_by"),
                    (r.get("config") or {}).get("max_rounds"),
                    when_short(r.get("created")),
                )
                for r in rs
            ],
        ),
    )


@room_app.command("delete")
def delete(ctx: typer.Context, room_id: RoomId, as_json: JsonFlag = False) -> None:
    """Delete an empty room you created (the operator: any empty room).

    Members leave first; its meetings stay on the record."""
    client(ctx).delete(f"/v1/rooms/{room_id}")
    deleted = {"room_id": room_id, "deleted": True}
    emit(ctx, as_json, deleted, lambda d: console.print(Text(f"room {room_id} deleted")))


@room_app.command("show")
def show(ctx: typer.Context, room_id: RoomId, as_json: JsonFlag = False) -> None:
    """A room, its settings and its members with their state now."""
    hub = client(ctx)
    room = hub.get(f"/v1/rooms/{room_id}")
    members = hub.get(f"/v1/rooms/{room_id}/members")
    emit_parts(ctx, as_json, {"room": (room, render_room), "members": (members, render_members)})


@room_app.command("members")
def members(ctx: typer.Context, room_id: RoomId, as_json: JsonFlag = False) -> None:
    """Members and their state: working, idle-waiting, done, awaiting-entry or in-meeting."""
    emit(ctx, as_json, client(ctx).get(f"/v1/rooms/{room_id}/members"), render_members)


@room_app.command("join")
def join(
    ctx: typer.Context,
    room_id: RoomId,
    agent_id: AgentArg = None,
    session: Annotated[
        str | None, typer.Option(help="The session joining (only the agent's main one may).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Join a room (an agent itself, or the operator adds one): consent to be summoned."""
    hub = client(ctx)
    body: dict[str, Any] = {"agent_id": agent_or_me(hub, agent_id, "add")}
    if session is not None:
        body["session_id"] = session
    emit(ctx, as_json, hub.post(f"/v1/rooms/{room_id}/members", body), render_member)


@room_app.command("leave")
def leave(
    ctx: typer.Context, room_id: RoomId, agent_id: AgentArg = None, as_json: JsonFlag = False
) -> None:
    """Leave a room (an agent itself, or the operator removes one); not during a meeting."""
    hub = client(ctx)
    who = agent_or_me(hub, agent_id, "remove")
    hub.delete(f"/v1/rooms/{room_id}/members/{who}")
    left = {"room_id": room_id, "agent_id": who, "left": True}
    emit(ctx, as_json, left, lambda d: console.print(Text(f"{who} left room {room_id}")))


@room_app.command("done")
def done(
    ctx: typer.Context,
    undo: Annotated[bool, typer.Option("--undo", help="Mark your work not done any more.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Mark your work done (an agent).

    A done member enters a meeting at once and is done again after it."""
    emit(ctx, as_json, client(ctx).post("/v1/rooms/done", {"done": not undo}), render_member)


# -- meetings --------------------------------------------------------------------------------------
@room_app.command("convene")
def convene(
    ctx: typer.Context,
    room_id: RoomId,
    topic: Annotated[str, typer.Option(help="What the meeting is about.")],
    member: Annotated[
        list[str] | None,
        typer.Option("--member", help="Summon only these members (repeatable; default: all)."),
    ] = None,
    watch: Watch = False,
    as_json: JsonFlag = False,
) -> None:
    """Convene a meeting of the room's members (or of those named).

    Idle and done members enter at once, working ones at the end of their turn. Humans convene
    as the human seat: the room's moderator runtime (or safe rotation) moderates."""
    body: dict[str, Any] = {"topic": topic}
    if member:
        body["members"] = member
    meeting = client(ctx).post(f"/v1/rooms/{room_id}/meetings", body)
    if not watch:
        emit(ctx, as_json, meeting, render_meeting)
        return
    if wants_json(ctx, as_json):
        print_event("meeting", meeting)  # the stream that follows is JSON lines too
    follow(ctx, meeting["id"], as_json, initial=meeting)


@room_app.command("meetings")
def meetings(ctx: typer.Context, room_id: RoomId, as_json: JsonFlag = False) -> None:
    """A room's meetings, oldest first."""
    rows = [m for page, _ in client(ctx).pages(f"/v1/rooms/{room_id}/meetings") for m in page]
    emit(ctx, as_json, rows, lambda ms: table("meetings", MEETING_COLUMNS, meeting_rows(ms)))


@room_app.command("meeting")
def meeting(ctx: typer.Context, meeting_id: MeetingId, as_json: JsonFlag = False) -> None:
    """One meeting: its state and every speech attempt with the runtime and model that made it."""
    hub = client(ctx)
    state = hub.get(f"/v1/rooms/meetings/{meeting_id}")
    speeches = hub.get(f"/v1/rooms/meetings/{meeting_id}/speeches")
    emit_parts(
        ctx, as_json, {"meeting": (state, render_meeting), "speeches": (speeches, render_speeches)}
    )


@room_app.command("watch")
def watch_command(ctx: typer.Context, meeting_id: MeetingId, as_json: JsonFlag = False) -> None:
    """Watch a meeting live; returns when it ends.

    Shows the topic, round x/y, who is present, awaiting or absent, the transcript with each
    speaker's runtime and model, humans' posts and the end reason."""
    follow(ctx, meeting_id, as_json)


@room_app.command("transcript")
def transcript(ctx: typer.Context, meeting_id: MeetingId, as_json: JsonFlag = False) -> None:
    """A meeting's messages in order: speeches, humans' posts, moderator and system notes."""
    path = f"/v1/rooms/meetings/{meeting_id}/transcript"
    rows = [m for page, _ in client(ctx).pages(path) for m in page]

    def render(ms: list[dict[str, Any]]) -> None:
        screen = MeetingScreen(console, machine=False)
        for m in ms:
            screen.message(m)
        if not ms:
            console.print("[dim]no messages[/dim]")

    emit(ctx, as_json, rows, render)


@room_app.command("post")
def post(
    ctx: typer.Context,
    meeting_id: MeetingId,
    text: Annotated[str, typer.Argument(help="What to say.")],
    as_json: JsonFlag = False,
) -> None:
    """Speak into a running meeting as a human, without taking a turn.

    The next speaker sees it in its transcript."""
    posted = client(ctx).post(f"/v1/rooms/meetings/{meeting_id}/messages", {"content": text})
    emit(
        ctx,
        as_json,
        posted,
        lambda m: console.print(Text(f"posted {m['id']} (#{m['seq']}) into meeting {meeting_id}")),
    )


@room_app.command("stop")
def stop(
    ctx: typer.Context,
    meeting_id: Annotated[
        str | None,
        typer.Argument(help="stop just this meeting; without it: the emergency stop of all"),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Stop one meeting, or (no meeting id) the emergency stop of every running meeting you may
    stop.

    Returns once the meetings have ended (reason 'stopped')."""
    if meeting_id is not None:
        one = client(ctx).post(f"/v1/rooms/meetings/{meeting_id}/stop")
        emit(
            ctx,
            as_json,
            one,
            lambda m: table("stopped meeting", MEETING_COLUMNS, meeting_rows([m])),
        )
        return
    stopped = client(ctx).post("/v1/rooms/stop")

    def render(ms: list[dict[str, Any]]) -> None:
        if not ms:
            console.print(Text("no meeting you may stop was running"))
            return
        table("stopped meetings", MEETING_COLUMNS, meeting_rows(ms))

    emit(ctx, as_json, stopped, render)


@room_app.command("minutes")
def minutes(ctx: typer.Context, meeting_id: MeetingId, as_json: JsonFlag = False) -> None:
    """Each member's own minutes (an agent sees its own; humans and the operator all)."""
    emit(ctx, as_json, client(ctx).get(f"/v1/rooms/meetings/{meeting_id}/minutes"), render_minutes)


# -- the light path --------------------------------------------------------------------------------
@room_app.command("brief")
def brief(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="Where you stand, in a few lines.")],
    as_json: JsonFlag = False,
) -> None:
    """Post a bounded brief to your room's board (an agent); the latest few are kept."""
    posted = client(ctx).post("/v1/rooms/briefs", {"text": text})
    emit(
        ctx,
        as_json,
        posted,
        lambda b: console.print(Text(f"brief {b['id']} posted to room {b['room_id']}")),
    )


@room_app.command("board")
def board(ctx: typer.Context, room_id: RoomId, as_json: JsonFlag = False) -> None:
    """The room's briefing board, oldest first."""
    rows = client(ctx).get(f"/v1/rooms/{room_id}/briefs")
    emit(
        ctx,
        as_json,
        rows,
        lambda bs: table(
            "briefs",
            ["member", "posted", "brief"],
            [(b["agent_id"], when_short(b.get("created")), b.get("text")) for b in bs],
        ),
    )


@room_app.command("pulse")
def pulse(
    ctx: typer.Context,
    room_id: RoomId,
    log: Annotated[
        bool, typer.Option("--log", help="Show the pulse log instead of running a pulse.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run the room's light tick once, or show its log (--log).

    A pulse broadcasts the board if it changed, looks for a stall and escalates one to a
    meeting; the log has one entry per change of conclusion."""
    hub = client(ctx)
    if log:
        rows = [e for page, _ in hub.pages(f"/v1/rooms/{room_id}/pulse") for e in page]
        emit(
            ctx,
            as_json,
            rows,
            lambda es: table(
                "pulse log",
                ["when", "conclusion", "escalated", "reason", "meeting"],
                [
                    (
                        when_short(e.get("created")),
                        e.get("conclusion"),
                        "yes" if e.get("escalated") else "no",
                        e.get("reason"),
                        e.get("meeting_id"),
                    )
                    for e in es
                ],
            ),
        )
        return
    result = hub.post(f"/v1/rooms/{room_id}/pulse")

    def render(p: dict[str, Any]) -> None:
        signals = [f"{s.get('kind')}:{s.get('member') or '*'}" for s in p.get("signals") or []]
        fields(
            f"pulse of room {p['room_id']}",
            [
                ("conclusion", p.get("conclusion")),
                ("signals", signals),
                ("escalated", "yes" if p.get("escalated") else "no"),
                ("reason", p.get("reason")),
                ("meeting", p.get("meeting_id")),
                ("logged", "yes" if p.get("logged") else "no (conclusion unchanged)"),
                ("board", p.get("summary")),
            ],
        )

    emit(ctx, as_json, result, render)
