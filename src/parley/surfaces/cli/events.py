"""``parley events``: the append-only event log, as a table or followed live."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.text import Text

from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    ctrl_c_stops_watching,
    emit,
    print_json_line,
    table,
    wants_json,
    when_short,
)


def event_row(ev: dict[str, Any]) -> tuple[Any, ...]:
    payload = json.dumps(ev.get("payload") or {}, ensure_ascii=False)
    return (ev["id"], when_short(ev.get("time")), ev["type"], ev["actor"], ev["subject"], payload)


def events(
    ctx: typer.Context,
    type_: Annotated[
        str | None, typer.Option("--type", help="Event type; ending in '.' matches a prefix.")
    ] = None,
    after: Annotated[str | None, typer.Option(help="Only events after this event id.")] = None,
    subject: Annotated[str | None, typer.Option(help="Only events about this subject.")] = None,
    actor: Annotated[str | None, typer.Option(help="Only events by this actor.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    follow: Annotated[bool, typer.Option(help="Then follow new events live.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The event log (operator)."""
    hub = client(ctx)
    rows = hub.get("/v1/events", type=type_, after=after, subject=subject, actor=actor, limit=limit)
    machine = wants_json(ctx, as_json)
    if not follow:
        columns = ["id", "time", "type", "actor", "subject", "payload"]
        emit(ctx, as_json, rows, lambda evs: table("events", columns, map(event_row, evs)))
        return
    last = after
    for ev in rows:
        last = ev["id"]
        show_event(ev, machine)
    with ctrl_c_stops_watching():
        for item in hub.stream("/v1/events/stream", last_id=last):
            if item.event != "event":
                continue
            ev = item.json()
            if matches(ev, type_, subject, actor):
                show_event(ev, machine)


def matches(ev: dict[str, Any], type_: str | None, subject: str | None, actor: str | None) -> bool:
    if type_ and not (ev["type"].startswith(type_) if type_.endswith(".") else ev["type"] == type_):
        return False
    return (subject is None or ev["subject"] == subject) and (actor is None or ev["actor"] == actor)


def show_event(ev: dict[str, Any], machine: bool) -> None:
    if machine:
        print_json_line(ev)
        return
    _, time, type_, actor, subject, payload = event_row(ev)
    line = Text()
    line.append(f"{time} ", style="dim")
    line.append(f"{type_} ", style="bold")
    line.append(f"{actor} → {subject} ")
    line.append(payload, style="dim")
    console.print(line)
