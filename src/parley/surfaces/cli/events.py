"""``parley events``: the append-only event log, as a table or followed live."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.text import Text

from parley.surfaces.cli.client import STREAM_OPENED, HubClient
from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    ctrl_c_stops_watching,
    emit,
    print_event,
    table,
    wants_json,
    when_short,
)


def event_row(ev: dict[str, Any]) -> tuple[Any, ...]:
    payload = json.dumps(ev.get("payload") or {}, ensure_ascii=False)
    return (ev["id"], when_short(ev.get("time")), ev["type"], ev["actor"], ev["subject"], payload)


SINCE_HELP = "Only events since then: a duration back from now (30s, 10m, 2h, 7d) or a time."
DURATION = re.compile(r"^(\d+)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(value: str) -> str:
    """``--since`` as an ISO time for the API: a duration back from now, or a time itself."""
    matched = DURATION.match(value.strip())
    if matched:
        back = timedelta(seconds=int(matched.group(1)) * UNIT_SECONDS[matched.group(2)])
        return (datetime.now(UTC) - back).isoformat()
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            "give a duration such as 10m, 2h or 7d, or a time such as 2026-05-01T09:00",
            param_hint="--since",
        ) from None
    return (parsed if parsed.tzinfo else parsed.astimezone()).isoformat()


# An event's subject names what it is about as KIND:ID; each kind's path takes a name or the
# start of an id as well, and answers the full id.
SUBJECT_PATHS = {
    "channel": "/v1/channels/",
    "room": "/v1/rooms/",
    "meeting": "/v1/rooms/meetings/",
    "worker": "/v1/workers/",
    "message": "/v1/mail/",
    "task": "/v1/tasks/",
}
FULL_ID = re.compile(r"([a-z]{1,8}-)?[0-9A-HJKMNP-TV-Z]{26}")


def full_subject(hub: HubClient, subject: str | None) -> str | None:
    """``channel:design`` as the log records it, ``channel:<its id>``; other subjects as given."""
    if subject is None:
        return None
    kind, sep, ref = subject.partition(":")
    if not sep or kind not in SUBJECT_PATHS or not ref or FULL_ID.fullmatch(ref):
        return subject
    found = hub.get(SUBJECT_PATHS[kind] + quote(ref, safe=""))
    return f"{kind}:{found['id']}"


def events(
    ctx: typer.Context,
    type_: Annotated[
        str | None, typer.Option("--type", help="Event type; ending in '.' matches a prefix.")
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option(
            help="Only events about this subject: an agent or human id, or KIND:REF such as "
            "channel:design, worker:w-01JF3, room:sync, meeting:…, message:…, task:… (a name "
            "or the start of an id)."
        ),
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Only events by this actor.")] = None,
    since: Annotated[str | None, typer.Option(help=SINCE_HELP)] = None,
    before: Annotated[
        str | None, typer.Option(metavar="EVENT_ID", help="Only events older than this one.")
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(
            metavar="EVENT_ID", help="Only events after this one, oldest first (for scripts)."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 50,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Follow new events live, from now on.")
    ] = False,
    from_start: Annotated[
        bool,
        typer.Option("--from-start", help="With --follow: the whole log first, then live."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """The event log, newest first (operator); --follow prints new events as they happen."""
    hub = client(ctx)
    machine = wants_json(ctx, as_json)
    filters = {"type": type_, "subject": full_subject(hub, subject), "actor": actor}
    if follow:
        follow_events(hub, machine, filters, after=after, from_start=from_start)
        return
    if after is not None:
        rows = hub.get("/v1/events", after=after, limit=limit, **filters)
        more = False
    else:
        since_iso = parse_since(since) if since else None
        rows = hub.get(
            "/v1/events", newest=True, before=before, since=since_iso, limit=limit, **filters
        )
        more = len(rows) == limit
    columns = ["id", "time", "type", "actor", "subject", "payload"]
    # At 80 columns an event's type, actor and subject are whole; its id (the hint below
    # names the one to page from) and its payload come where there is room.
    spare = ("id", "payload")
    emit(ctx, as_json, rows, lambda evs: table("events", columns, map(event_row, evs), spare=spare))
    if more:
        # On stderr, so --json stays JSON.
        sys.stderr.write(f"older events may follow; list them with --before {rows[-1]['id']}\n")


def follow_events(
    hub: HubClient,
    machine: bool,
    filters: dict[str, str | None],
    *,
    after: str | None,
    from_start: bool,
) -> None:
    """New events live: from now on, after ``after``, or the whole log first."""
    # Without a position the hub's stream starts from now; every event id sorts after "0".
    last = after if after is not None else ("0" if from_start else None)
    announced = False
    with ctrl_c_stops_watching():
        for item in hub.stream("/v1/events/stream", last_id=last):
            if item.event == STREAM_OPENED and not announced:
                # On stderr, so --json stays JSON lines; from here on nothing is missed.
                sys.stderr.write("following the event log; Ctrl+C stops\n")
                sys.stderr.flush()
                announced = True
            if item.event != "event":
                continue
            ev = item.json()
            if matches(ev, filters["type"], filters["subject"], filters["actor"]):
                show_event(ev, machine)


def matches(ev: dict[str, Any], type_: str | None, subject: str | None, actor: str | None) -> bool:
    if type_ and not (ev["type"].startswith(type_) if type_.endswith(".") else ev["type"] == type_):
        return False
    return (subject is None or ev["subject"] == subject) and (actor is None or ev["actor"] == actor)


def show_event(ev: dict[str, Any], machine: bool) -> None:
    if machine:
        print_event("event", ev)
        return
    _, time, type_, actor, subject, payload = event_row(ev)
    line = Text()
    line.append(f"{time} ", style="dim")
    line.append(f"{type_} ", style="bold")
    line.append(f"{actor} → {subject} ")
    line.append(payload, style="dim")
    console.print(line)
