"""CLI tables at 80 columns: every line fits, ids and times are whole (short ids, unique among
the rows shown), and no cell is cut below a readable width — no hub."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from parley.core.ids import _encode
from parley.surfaces.cli import events, mail, output, worker_view
from parley.surfaces.cli.channels import channel_rows

NOW = datetime.now(UTC)


def ulid(ms_offset: int, rand: int = 12345678901234567) -> str:
    return _encode(int(NOW.timestamp() * 1000) + ms_offset, rand)


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    console = Console(width=80, highlight=False, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    monkeypatch.setattr(output, "console", console)
    yield console
    console.file.close()


def rendered(console: Console) -> list[str]:
    return console.export_text().rstrip("\n").split("\n")


def body_rows(lines: list[str]) -> list[str]:
    """The rows under the header rule."""
    return lines[lines.index(next(line for line in lines if set(line.strip()) == {"─"})) + 1 :]


def message(index: int, **extra: object) -> dict[str, object]:
    return {
        "id": ulid(index * 7),
        "created": (NOW - timedelta(days=1)).isoformat(),
        "from_id": "reviewer-7",
        "recipient_id": "alice",
        "kind": "task-dispatch",
        "status": "in_progress",
        "subject": "Review the parser and the tokenizer before the release",
        "labels": ["wave-1", "parser"],
        "seq": index,
        **extra,
    }


def test_the_inbox_fits_80_columns_with_whole_short_ids_sender_and_status(
    screen: Console,
) -> None:
    messages = [message(i) for i in range(3)]
    output.table(
        "inbox of alice", mail.MAIL_COLUMNS, mail.mail_rows(messages), drop=("to", "labels")
    )
    lines = rendered(screen)
    assert all(len(line) <= 80 for line in lines), lines
    rows = body_rows(lines)
    assert len(rows) == 3
    for row, sent in zip(rows, messages, strict=True):
        short = row.split()[0]
        assert 10 <= len(short) < 26 and str(sent["id"]).startswith(short)
        assert "reviewer-7" in row and "in_progress" in row
        # The subject keeps a readable start rather than four characters.
        assert "Review the p" in row


def test_ids_made_in_one_millisecond_stay_distinct_when_shortened() -> None:
    same_ms = [ulid(0, 5), ulid(0, 6), ulid(0, 7)]
    short = output.short_ids([*same_ms, "alice", f"vs-{ulid(50)}"])
    assert len({short[i] for i in same_ms}) == 3
    assert "alice" not in short
    assert short[f"vs-{ulid(50)}"] == f"vs-{ulid(50)}"[:13]
    for full in same_ms:
        assert full.startswith(short[full])


def test_a_wide_terminal_keeps_full_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(width=200, highlight=False, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    monkeypatch.setattr(output, "console", console)
    messages = [message(i) for i in range(2)]
    output.table("inbox", mail.MAIL_COLUMNS, mail.mail_rows(messages))
    text = console.export_text()
    console.file.close()
    assert all(str(m["id"]) in text for m in messages)


@pytest.mark.parametrize(
    ("columns", "rows"),
    [
        (mail.MAIL_COLUMNS, mail.mail_rows([message(i, subject="x" * 90) for i in range(4)])),
        (
            ["id", "time", "type", "actor", "subject", "payload"],
            [
                events.event_row(
                    {
                        "id": ulid(i),
                        "time": NOW.isoformat(),
                        "type": "discussion.task_finished",
                        "actor": "operator",
                        "subject": ulid(i + 100),
                        "payload": {"end_reason": "unanimous", "rounds": 3, "note": "y" * 60},
                    }
                )
                for i in range(3)
            ],
        ),
        (
            ["id", "name", "kind", "status", "members", "messages"],
            channel_rows(
                [
                    {
                        "id": ulid(i),
                        "name": "design-review-of-the-new-parser",
                        "kind": "discussion",
                        "status": "open",
                        "members": ["alice", "bob", "carol", "dave", "eve"],
                        "last_seq": 120,
                    }
                    for i in range(3)
                ]
            ),
        ),
    ],
    ids=["mail", "events", "channels"],
)
def test_every_table_fits_80_columns_and_cuts_no_cell_below_readable(
    screen: Console, columns: list[str], rows: list[tuple[object, ...]]
) -> None:
    output.table("t", columns, rows)
    lines = rendered(screen)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    for row in body_rows(lines):
        for cell in row.split("  "):
            cell = cell.strip()
            if cell.endswith("…"):
                assert len(cell) >= output.READABLE_WIDTH, row


def test_the_worker_table_fits_80_columns(screen: Console) -> None:
    workers = [
        {
            "id": f"w-{ulid(i)}",
            "state": "running",
            "agent_id": "coder",
            "purpose": "Port the tokenizer to the new grammar and report",
            "parent_worker_id": f"w-{ulid(0)}",
            "updated": NOW.isoformat(),
        }
        for i in range(3)
    ]
    shown = worker_view.worker_table("workers", workers, when=output.when_short)
    assert shown is not None
    screen.print(shown)
    lines = rendered(screen)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert "Port the tok" in "\n".join(lines)


def test_an_events_table_shows_each_type_whole_rather_than_all_of_the_payload(
    screen: Console,
) -> None:
    types = ["principal.created", "channel.message", "task.finished", "token.issued"]
    rows = [
        events.event_row(
            {
                "id": ulid(i),
                "time": NOW.isoformat(),
                "type": kind,
                "actor": "operator",
                "subject": "alice",
                "payload": {"message_id": ulid(i + 9), "note": "y" * 60},
            }
        )
        for i, kind in enumerate(types)
    ]
    output.table("events", ["id", "time", "type", "actor", "subject", "payload"], rows)
    lines = rendered(screen)
    assert all(len(line) <= 80 for line in lines), lines
    for row, kind in zip(body_rows(lines), types, strict=True):
        assert f" {kind} " in row, row


def test_an_empty_column_gives_its_room_to_a_subject(screen: Console) -> None:
    sent = message(
        0,
        created=NOW.isoformat(),
        from_id="operator",
        kind="task",
        status="delivered",
        subject="Review the parser",
        labels=[],
    )
    output.table("inbox of alice", mail.MAIL_COLUMNS, mail.mail_rows([sent]))
    lines = rendered(screen)
    assert all(len(line) <= 80 for line in lines), lines
    assert "Review the parser" in body_rows(lines)[0]
    assert "labels" not in lines[1]


def same_ms_events(count: int, shift: int = 0) -> list[tuple[object, ...]]:
    """Events stored in one millisecond: their ids differ only from the character ``shift``
    selects (0: the last)."""
    return [
        events.event_row(
            {
                "id": ulid(0, 77 + (i << shift)),
                "time": NOW.isoformat(),
                "type": "mail.status_changed",
                "actor": "operator",
                "subject": f"message:{ulid(-5, 3)}",
                "payload": {"from": "delivered", "to": "closed"},
            }
        )
        for i in range(count)
    ]


def test_a_shortened_id_is_never_cut_further(screen: Console) -> None:
    # Ids of one millisecond stay whole (they differ in their last character) beside a short
    # one of another: the column of them was cut to 12 characters, which address nothing.
    rows = [*same_ms_events(3), *same_ms_events(1, shift=70)]
    rows[-1] = (ulid(-9000), *rows[-1][1:])
    output.table("events", ["id", "time", "type", "actor", "subject", "payload"], rows)
    lines = rendered(screen)
    assert all(len(line) <= 80 for line in lines), lines
    shown = [row.split()[0] for row in body_rows(lines)]
    assert len(set(shown)) == 4 and not any("…" in cell for cell in shown), shown
    assert all(str(row[0]).startswith(cell) for row, cell in zip(rows, shown, strict=True))


def test_the_event_log_at_80_columns_keeps_type_actor_and_subject_whole(screen: Console) -> None:
    output.table(
        "events",
        ["id", "time", "type", "actor", "subject", "payload"],
        same_ms_events(3),
        spare=("id", "payload"),
    )
    lines = rendered(screen)
    assert all(len(line) <= 80 for line in lines), lines
    for row in body_rows(lines):
        assert " mail.status_changed " in row and f"message:{ulid(-5, 3)}"[:18] in row, row
    # Short ids leave room for them: an id column again.
    output.table(
        "events",
        ["id", "time", "type", "actor", "subject", "payload"],
        [
            events.event_row(
                {
                    "id": ulid(i * 9),
                    "time": NOW.isoformat(),
                    "type": "token.issued",
                    "actor": "operator",
                    "subject": "alice",
                    "payload": {},
                }
            )
            for i in range(2)
        ],
        spare=("id", "payload"),
    )
    assert rendered(screen)[1].split()[0] == "id"
