"""How the CLI prints: Rich tables for people, the API's raw JSON for scripts, plain errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from parley.surfaces.cli.client import ClientConfig, HubClient, resolve_config

console = Console(highlight=False)

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print the raw JSON returned by the API (for scripts).")
]


@dataclass
class State:
    """The global options, shared by every command through the click context."""

    home: str | None = None
    url: str | None = None
    token: str | None = None
    json: bool = False

    def config(self) -> ClientConfig:
        return resolve_config(home=self.home, url=self.url, token=self.token)


def state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    if not isinstance(obj, State):
        obj = State()
        ctx.find_root().obj = obj
    return obj


def client(ctx: typer.Context) -> HubClient:
    """A client of the configured hub, closed when the command ends."""
    c = HubClient(state(ctx).config())
    ctx.call_on_close(c.close)
    return c


def wants_json(ctx: typer.Context, as_json: bool) -> bool:
    return as_json or state(ctx).json


def emit(ctx: typer.Context, as_json: bool, data: Any, render: Callable[[Any], None]) -> None:
    """Print ``data`` as JSON when asked, else through ``render``."""
    if wants_json(ctx, as_json):
        print_json(data)
    else:
        render(data)


def emit_parts(
    ctx: typer.Context, as_json: bool, parts: Mapping[str, tuple[Any, Callable[[Any], None]]]
) -> None:
    """Print several parts as one JSON object keyed by their names when asked, else each part
    through its own renderer, in order."""
    data = {name: value for name, (value, _) in parts.items()}

    def render(_: Any) -> None:
        for value, render_part in parts.values():
            render_part(value)

    emit(ctx, as_json, data, render)


@contextmanager
def ctrl_c_stops_watching() -> Iterator[None]:
    """Ctrl-C ends a live view quietly (exit status 0); what it watched goes on."""
    try:
        yield
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def json_object(raw: str, param_hint: str) -> dict[str, Any]:
    """An option's value parsed as a JSON object, or a usage error that names the option."""
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint=param_hint) from None
    if not isinstance(parsed, dict):
        raise typer.BadParameter("must be a JSON object", param_hint=param_hint)
    return parsed


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_json_line(data: Any) -> None:
    """One compact JSON document per line, for streams."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_error(code: str, message: str) -> None:
    # Plain text, never Rich: the message quotes values like '[x]' that markup would eat.
    sys.stderr.write(f"error [{code}]: {message}\n")
    sys.stderr.flush()


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left", header_style="bold")
    for col in columns:
        # Ids are copied into the next command: never break them across lines.
        t.add_column(
            col, overflow="fold", no_wrap=col == "id", min_width=26 if col == "id" else None
        )
    count = 0
    for row in rows:
        t.add_row(*(Text("" if v is None else str(v)) for v in row))
        count += 1
    if count == 0:
        console.print(f"[dim]{title or 'nothing'}: none[/dim]" if title else "[dim]none[/dim]")
        return
    console.print(t)


def fields(title: str, items: Sequence[tuple[str, Any]]) -> None:
    """A two-column key/value table."""
    t = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2, 0, 0))
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for key, value in items:
        if value is None or value == [] or value == {}:
            continue
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        elif isinstance(value, dict):
            value = json.dumps(value, ensure_ascii=False)
        t.add_row(key, Text(str(value)))
    console.print(t)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def when(value: str | None) -> str:
    """A timestamp in local time, to the second."""
    parsed = parse_time(value)
    return parsed.astimezone().strftime("%Y-%m-%d %H:%M:%S") if parsed else ""


def when_short(value: str | None) -> str:
    """A timestamp in local time for table cells: month-day and time."""
    parsed = parse_time(value)
    return parsed.astimezone().strftime("%m-%d %H:%M:%S") if parsed else ""


def age(seconds: float | None) -> str:
    """A duration the way a person says it: 42s, 5m, 3h, 2d."""
    if seconds is None:
        return "-"
    s = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"
