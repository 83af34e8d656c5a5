"""How the CLI prints: Rich tables for people, the API's raw JSON for scripts, plain errors."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich import box
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
    """Ctrl+C ends a live view quietly (exit status 0); what it watched goes on."""
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
    """One compact JSON document per line, for streams. Every live view prints the same
    shape: ``{"event": <what happened>, "data": <the API's object>}`` (``print_event``)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_event(event: str, data: Any) -> None:
    """One line of a live view in ``--json``: what happened and the API's object."""
    print_json_line({"event": event, "data": data})


def print_error(code: str, message: str) -> None:
    # Plain text, never Rich: the message quotes values like '[x]' that markup would eat.
    sys.stderr.write(f"error [{code}]: {message}\n")
    sys.stderr.flush()


# No column is cut narrower than this (unless its content is shorter): a cell of eight
# characters and an ellipsis still says what it is.
READABLE_WIDTH = 12
# Columns are separated by two spaces: one of padding, one of the (blank) rule.
COLUMN_GAP = 2
# A ULID, alone or after a short prefix such as ``vs-``: 26 characters of Crockford's base32.
ULID_TEXT = re.compile(r"^([a-z]{1,8}[-:])?[0-9A-HJKMNP-TV-Z]{26}$")
# A short id keeps the ULID's millisecond (its first ten characters) and more when two ids
# shown together would otherwise look the same.
SHORT_ID_MIN = 10
# Times as ``when_short`` prints them: never cut either.
SHORT_TIME = re.compile(r"^(\d\d-\d\d )?\d\d:\d\d(:\d\d)?$")


def atomic(cell: Text) -> bool:
    """Ids and times are copied or compared whole: a column of them is never cut."""
    return bool(ULID_TEXT.match(cell.plain) or SHORT_TIME.match(cell.plain))


def short_ids(values: Iterable[str]) -> dict[str, str]:
    """Each ULID-shaped value → its shortest prefix (at least ``SHORT_ID_MIN`` characters of
    the ULID) that no other value given shares; other values are left out."""
    ids = sorted({v for v in values if ULID_TEXT.match(v)})
    short: dict[str, str] = {}
    for index, value in enumerate(ids):
        head = len(value) - 26
        length = head + SHORT_ID_MIN
        for other in (
            ids[index - 1] if index else None,
            ids[index + 1] if index + 1 < len(ids) else None,
        ):
            if other is None:
                continue
            common = 0
            while common < len(value) and common < len(other) and value[common] == other[common]:
                common += 1
            length = max(length, common + 1)
        short[value] = value[: min(length, len(value))]
    return short


def _plain(cell: Any) -> Text:
    if isinstance(cell, Text):
        text = cell.copy()
        text.plain = text.plain.replace("\n", " ")
        return text
    return Text("" if cell is None else str(cell).replace("\n", " "))


def fit_widths(
    columns: Sequence[str],
    rows: Sequence[Sequence[Text]],
    width: int,
    drop: Sequence[str],
    *,
    short: Collection[str] = (),
    spare: Sequence[str] = (),
) -> dict[str, int]:
    """The width of each column kept so the table fits ``width`` characters: rather than cut a
    column below ``READABLE_WIDTH`` (or an id or a time at all), empty columns go, then the
    optional ones (``drop``, first dropped first), then the last ones; what room is left makes
    whole the columns that miss the least, and the rest goes to the one that misses the
    most."""
    natural = {
        name: max([len(name), *(rows[r][i].cell_len for r in range(len(rows)))])
        for i, name in enumerate(columns)
    }
    kept = list(columns)

    def kept_whole(cell: Text) -> bool:
        return atomic(cell) or cell.plain in short

    whole = {
        name
        for i, name in enumerate(columns)
        if any(kept_whole(row[i]) for row in rows)
        and all(kept_whole(row[i]) or not row[i].plain for row in rows)
    }

    def floor(name: str) -> int:
        if name in whole:
            return natural[name]
        return min(natural[name], max(READABLE_WIDTH, len(name)))

    def needed(names: Sequence[str], size: Callable[[str], int]) -> int:
        return sum(size(n) for n in names) + COLUMN_GAP * (len(names) - 1)

    # A table that does not fit whole first loses the columns with nothing in them, then the
    # named optional columns, then (a narrow terminal) the last columns but the first.
    if needed(kept, natural.__getitem__) > width:
        for i, name in enumerate(columns):
            if i and not any(row[i].plain for row in rows):
                kept.remove(name)
    kept = keep_spare(kept, spare, width, natural, floor)
    for name in [*drop, *reversed(columns[1:])]:
        if needed(kept, floor) <= width:
            break
        if name in kept:
            kept.remove(name)
    widths = {name: floor(name) for name in kept}
    room = width - needed(kept, widths.__getitem__)
    # Hand out the room to the columns that miss the least first, so that as many as can be are
    # shown whole (an event's type, a subject) rather than one long column (a payload) taking
    # it all; the last of the room goes to the column that misses the most.
    for name in sorted(kept, key=lambda n: natural[n] - widths[n]):
        grant = min(room, natural[name] - widths[name])
        if grant <= 0:
            continue
        widths[name] += grant
        room -= grant
    return widths


def keep_spare(
    kept: list[str],
    spare: Sequence[str],
    width: int,
    natural: Mapping[str, int],
    floor: Callable[[str], int],
) -> list[str]:
    """The columns kept but the spare ones (an event's id, its payload) that do not fit: a
    spare column is shown, in the order given, only where every other column is whole and
    the spare ones kept before it still fit."""
    others = [n for n in kept if n not in spare]
    used = sum(natural[n] for n in others) + COLUMN_GAP * (len(others) - 1)
    dropped = set()
    for name in spare:
        if name not in kept:
            continue
        if used + COLUMN_GAP + floor(name) > width:
            dropped.add(name)
        else:
            used += COLUMN_GAP + floor(name)
    return [n for n in kept if n not in dropped]


def build_table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    drop: Sequence[str] = (),
    spare: Sequence[str] = (),
    width: int | None = None,
) -> Table | None:
    """A table that fits the terminal (``width``, default the console's): ids are shortened
    to a unique prefix (and never cut further) and optional columns dropped only when the full
    table does not fit, spare ones when another column would be cut, long cells end in an
    ellipsis; None when there are no rows."""
    cells = [[_plain(v) for v in row] for row in rows]
    if not cells:
        return None
    width = width or console.width
    full = sum(max([len(c), *(r[i].cell_len for r in cells)]) for i, c in enumerate(columns))
    short: dict[str, str] = {}
    if full + COLUMN_GAP * (len(columns) - 1) > width:
        short = short_ids(cell.plain for row in cells for cell in row)
        for row in cells:
            for i, cell in enumerate(row):
                if cell.plain in short and short[cell.plain] != cell.plain:
                    row[i] = Text(short[cell.plain], style=cell.style)
    # A shortened id is as atomic as the id: cut further, it would address nothing.
    widths = fit_widths(columns, cells, width, drop, short=set(short.values()), spare=spare)
    t = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    kept = [i for i, name in enumerate(columns) if name in widths]
    for i in kept:
        t.add_column(columns[i], width=widths[columns[i]], no_wrap=True, overflow="ellipsis")
    for row in cells:
        t.add_row(*(row[i] for i in kept))
    return t


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    drop: Sequence[str] = (),
    spare: Sequence[str] = (),
) -> None:
    """Print rows as a table that fits the terminal (see ``build_table``)."""
    t = build_table(title, columns, rows, drop=drop, spare=spare)
    if t is None:
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
    """A timestamp in local time for table cells: the time of day for today, else the
    month-day and the minute."""
    parsed = parse_time(value)
    if parsed is None:
        return ""
    local = parsed.astimezone()
    if local.date() == datetime.now().astimezone().date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%m-%d %H:%M")


def age(seconds: float | None) -> str:
    """A duration the way a person says it: 42s, 5m, 3h, 2d."""
    if seconds is None:
        return "-"
    s = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"
