"""M9: export then import of the mailroom format is exact for every field of a message, at any
time the hub can hold (sub-minute, sub-second, year 1 to year 9999)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from parley.core import mailroom as mr
from parley.core.limits import MAX_SEQ
from parley.core.mail import MAIL_KINDS, MAIL_STATUSES, MAX_TTL_SECONDS, CopyReason, Message

_text = st.text(st.characters(codec="utf-8"), max_size=30)
# Principal ids as the hub spells them, with the two the mailroom renames ("operator" is "ceo").
_principal = st.sampled_from(["operator", "system"]) | st.from_regex(
    r"[a-z][a-z0-9_.-]{0,20}", fullmatch=True
).filter(lambda x: x not in ("ceo", "all"))
_any_time = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
    timezones=st.just(UTC),
)
# 'created' plus the longest TTL must stay inside the calendar (the file reader checks it).
_created = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(UTC)
)


def _json(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=8,
    )


@st.composite
def messages(
    draw: st.DrawFn,
    message_id: str | None = None,
    text: st.SearchStrategy[str] = _text,
    recipients: st.SearchStrategy[str] = _principal,
) -> Message:
    """Any message the hub can hold: every field drawn, the only invariants those of the
    lifecycle (closed mail has an archive label, open mail none). ``text`` draws every free
    text, ``recipients`` the inbox owner."""
    optional_text = st.none() | text
    label = text | text.map(lambda t: f"wave:{t}") | text.map(lambda t: f"fix:{t}")
    to_kind = draw(st.sampled_from(["agent", "session", "channel", "broadcast"]))
    to_id = {
        "agent": _principal,
        "session": st.from_regex(r"vs-[A-Za-z0-9]{1,26}", fullmatch=True),
        "channel": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,25}", fullmatch=True),
        "broadcast": st.just("*"),
    }[to_kind]
    status = draw(st.sampled_from(MAIL_STATUSES))
    values: dict[str, Any] = {
        "id": message_id or draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=64)),
        "created": draw(_created),
        "ttl_seconds": draw(st.integers(1, MAX_TTL_SECONDS)),
        "from_kind": draw(st.sampled_from(["agent", "human", "system", "external"])),
        "from_id": draw(_principal),
        "to_kind": to_kind,
        "to_id": draw(to_id),
        "recipient_id": draw(recipients),
        "cc": draw(st.lists(_principal, max_size=3)),
        "kind": draw(st.sampled_from(MAIL_KINDS)),
        "subject": draw(text),
        "body": draw(text),
        "payload": draw(st.dictionaries(text, _json(text), max_size=3)),
        "parent_message_id": draw(optional_text),
        "correlation_id": draw(optional_text),
        "related": draw(st.lists(text, max_size=3)),
        "labels": draw(st.lists(label, max_size=5)),
        "status": status,
        "delivered_at": draw(st.none() | _any_time),
        "read_at": draw(st.none() | _any_time),
        "consumed_at": draw(st.none() | _any_time),
        "closed_at": draw(st.none() | _any_time),
        "failure_reason": draw(optional_text),
        "idempotency_key": draw(optional_text),
        "archive_label": draw(text.filter(bool)) if status == "closed" else None,
        "copy_of": draw(optional_text),
        "copy_reason": draw(st.none() | st.sampled_from(get_args(CopyReason))),
        "seq": draw(st.integers(0, MAX_SEQ)),
    }
    return Message.model_validate(values)


@st.composite
def mailrooms(draw: st.DrawFn) -> list[Message]:
    """A few messages with distinct ids, often in the same minute so that file names collide."""
    ids = draw(
        st.lists(
            st.from_regex(r"01[0-9A-Z]{24}", fullmatch=True), min_size=1, max_size=4, unique=True
        )
    )
    found = [draw(messages(message_id=i)) for i in ids]
    if draw(st.booleans()):
        same = found[0].created
        found = [x.model_copy(update={"created": same}) for x in found]
    return found


@settings(max_examples=300, deadline=None)
@given(msg=messages())
def test_one_message_round_trips_exactly(msg: Message) -> None:
    files = mr.export_files([msg])
    parsed = mr.parse_files(files)
    assert parsed.messages == [msg]
    assert parsed.guessed_from_kind == set()


@settings(max_examples=150, deadline=None)
@given(batch=mailrooms())
def test_a_mailroom_round_trips_exactly_and_re_exports_byte_for_byte(batch: list[Message]) -> None:
    files = mr.export_files(batch)
    parsed = mr.parse_files(files).messages
    assert sorted(parsed, key=lambda x: x.id) == sorted(batch, key=lambda x: x.id)
    assert mr.export_files(parsed) == files


def test_exact_times_are_written_to_the_microsecond_in_utc_next_to_the_seed_minute() -> None:
    at = datetime(1, 1, 1, 0, 0, 5, 7, tzinfo=UTC)
    msg = Message(
        id="m1",
        created=at,
        from_kind="agent",
        from_id="alice",
        to_kind="agent",
        to_id="bob",
        recipient_id="bob",
        kind="task",
        read_at=datetime(2026, 5, 31, 14, 30, 59, 123456, tzinfo=UTC),
    )
    [(path, text)] = mr.export_files([msg]).items()
    assert path == "inbox/bob/0001-01-01T0000-task-alice-to-bob.md"
    assert "created: 0001-01-01T00:00\n" in text
    assert "created_at: 0001-01-01T00:00:05.000007Z\n" in text
    assert "read_at: 2026-05-31T14:30:59.123456Z\n" in text


def test_a_file_of_an_older_export_still_imports_with_a_guessed_sender_kind() -> None:
    text = (
        "---\nid: old-1\nfrom: alice\nto: bob\nwave: W1\nkind: task\nstatus: read\n"
        "created: 2026-05-31T14:30\n---\n# hi\n"
    )
    parsed = mr.parse_files({"inbox/bob/2026-05-31T1430-task-alice-to-bob.md": text})
    [msg] = parsed.messages
    assert parsed.guessed_from_kind == {"old-1"}
    assert (msg.created, msg.read_at, msg.seq) == (
        datetime(2026, 5, 31, 14, 30, tzinfo=UTC),
        None,
        0,
    )
