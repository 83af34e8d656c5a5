"""The mailroom file format (M9) without a store: rendering, parsing, and their round trip."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.core import mailroom as mr
from parley.core.errors import InvalidRequest
from parley.core.mail import MAIL_KINDS, Message

T0 = datetime(2026, 5, 31, 15, 0, tzinfo=UTC)


def message(**overrides: Any) -> Message:
    values: dict[str, Any] = {
        "id": "01JZZZZZZZZZZZZZZZZZZZZZZZ",
        "created": T0,
        "from_kind": "agent",
        "from_id": "alice",
        "to_kind": "agent",
        "to_id": "bob",
        "recipient_id": "bob",
        "kind": "task",
        "subject": "Subject",
        "body": "Body",
    }
    values.update(overrides)
    return Message.model_validate(values)


def round_trip(messages: list[Message]) -> tuple[dict[str, str], list[Message]]:
    files = mr.export_files(messages)
    parsed = mr.parse_files(files).messages
    assert mr.export_files(parsed) == files
    return files, parsed


def test_layout_and_frontmatter_follow_the_seed() -> None:
    msg = message(
        id="msg-W17.3-001",
        from_kind="human",
        from_id="operator",
        to_id="architect-lin",
        recipient_id="architect-lin",
        created=datetime(2026, 5, 31, 14, 30, 59, tzinfo=UTC),
        labels=["wave:W17.3", "fix:F-13.5-1"],
        related=["msg-W17.3-000"],
        subject="W17.3 任务",
        body="正文",
    )
    files = mr.export_files([msg])
    assert list(files) == ["inbox/architect-lin/2026-05-31T1430-task-ceo-to-architect-lin.md"]
    assert next(iter(files.values())) == (
        "---\n"
        "id: msg-W17.3-001\n"
        "from: ceo\n"
        "to: architect-lin\n"
        "wave: W17.3\n"
        "kind: task\n"
        "status: pending\n"
        "created: 2026-05-31T14:30\n"
        "related:\n"
        "- msg-W17.3-000\n"
        "fixes:\n"
        "- F-13.5-1\n"
        "from_kind: human\n"
        "created_at: 2026-05-31T14:30:59.000000Z\n"
        "---\n"
        "# W17.3 任务\n"
        "\n"
        "正文\n"
    )


def test_every_key_is_written_in_the_documented_order() -> None:
    full = message(
        to_kind="broadcast",
        to_id="*",
        recipient_id="carol",
        status="closed",
        archive_label="W1",
        labels=["wave:W1", "fix:F-1", "other"],
        related=["r"],
        subject="two\nlines",
        parent_message_id="p",
        correlation_id="c",
        cc=["dave"],
        ttl_seconds=60,
        failure_reason="why",
        payload={"k": 1},
        created=T0.replace(microsecond=1),
        closed_at=T0.replace(second=1),
        delivered_at=T0,
        read_at=T0,
        consumed_at=T0,
        idempotency_key="key",
        copy_of="01ORIGINAL",
        copy_reason="redeliver",
        seq=7,
    )
    # Only an order wave, fixes and labels cannot rebuild needs all_labels.
    full = full.model_copy(update={"labels": ["other", *full.labels]})
    [text] = mr.export_files([full]).values()
    front = text.split("---\n")[1]
    keys = [line.split(":", 1)[0] for line in front.splitlines() if not line.startswith("- ")]
    assert keys == [*mr.FRONTMATTER_KEYS, *mr.EXTRA_KEYS]


def test_closed_mail_goes_to_the_archive_under_its_label() -> None:
    closed = message(status="closed", closed_at=T0, archive_label="W18")
    broadcast = message(
        id="01JZZZZZZZZZZZZZZZZZZZZZZY",
        kind="notice",
        to_kind="broadcast",
        to_id="*",
        recipient_id="carol",
        status="closed",
        closed_at=T0,
        archive_label="W18",
    )
    files, parsed = round_trip([closed, broadcast])
    assert set(files) == {
        "archive/W18/2026-05-31T1500-task-alice-to-bob.md",
        "archive/W18/2026-05-31T1500-notice-alice-to-all.md",
    }
    notice = files["archive/W18/2026-05-31T1500-notice-alice-to-all.md"]
    assert "closed: 2026-05-31T15:00\n" in notice
    assert "recipient: carol\n" in notice  # the archive folder does not say whose inbox it was
    assert "recipient:" not in files["archive/W18/2026-05-31T1500-task-alice-to-bob.md"]
    by_id = {p.id: p for p in parsed}
    assert by_id[broadcast.id].recipient_id == "carol"
    assert by_id[broadcast.id].to_kind == "broadcast"
    assert by_id[closed.id].archive_label == "W18"


def test_colliding_names_are_numbered_by_created_then_id() -> None:
    first = message(id="01A", created=T0.replace(second=50))
    second = message(id="01B", created=T0.replace(second=10))
    third = message(id="01C", created=T0.replace(second=30))
    files, _ = round_trip([third, first, second])
    names = {p.rsplit("/", 1)[1]: text for p, text in files.items()}
    # All three are in the same minute, the only time the file name keeps: the id decides.
    assert "id: 01A\n" in names["2026-05-31T1500-task-alice-to-bob.md"]
    assert "id: 01B\n" in names["2026-05-31T1500-task-alice-to-bob-2.md"]
    assert "id: 01C\n" in names["2026-05-31T1500-task-alice-to-bob-3.md"]


def test_a_numbered_name_never_overwrites_a_real_one() -> None:
    # "bob-2" is a real recipient whose archived mail would be named like bob's second.
    a = message(id="01A", status="closed", archive_label="W1")
    b = message(id="01B", status="closed", archive_label="W1")
    c = message(id="01C", to_id="bob-2", recipient_id="bob-2", status="closed", archive_label="W1")
    files, parsed = round_trip([a, b, c])
    assert len(files) == 3
    assert {p.id for p in parsed} == {"01A", "01B", "01C"}


@pytest.mark.parametrize(
    ("subject", "body"),
    [
        ("s", ""),
        ("s", "b"),
        ("s", "\n"),
        ("s", "\nleading blank"),
        ("s", "trailing newline\n"),
        ("", ""),
        ("", "no subject"),
        ("", "# looks like a heading"),
        ("", "#"),
        ("two\nlines", "b"),
        ("carriage\r", "b"),
        ("  padded  ", "---\nnot frontmatter\n---"),
        ("# hash", "body\r\nwith crlf\r\n"),
    ],
)
def test_subject_and_body_survive_the_round_trip(subject: str, body: str) -> None:
    _, [parsed] = round_trip([message(subject=subject, body=body)])
    assert (parsed.subject, parsed.body) == (subject, body)


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "colon: space",
        "# comment",
        "- dash",
        "'quote'",
        '"double"',
        "back\\slash",
        "ünïcødé 标签",
        "tab\there",
        "nel\x85u2028\u2028bom\ufeff",
        "ctrl\x00\x07\x1b\x7f",
        "emoji 🎉",
        "null",
        "123",
        "true",
        "2026-05-31T15:00:00",
    ],
)
def test_awkward_values_read_back_as_the_same_strings(value: str) -> None:
    msg = message(
        related=[value],
        labels=[f"wave:{value}", f"fix:{value}", value],
        correlation_id=value,
        parent_message_id="p",
        payload={"k": value, "n": 1.5e10},
    )
    _, [parsed] = round_trip([msg])
    assert parsed.related == [value]
    assert parsed.labels == [f"wave:{value}", f"fix:{value}", value]
    assert parsed.correlation_id == value
    assert parsed.payload == {"k": value, "n": 1.5e10}


@pytest.mark.parametrize("label", ["../../etc", "a/b", ".", "..", "C:\\x", "100%"])
def test_archive_labels_cannot_escape_their_folder(label: str) -> None:
    msg = message(status="closed", archive_label=label)
    files, [parsed] = round_trip([msg])
    [path] = files
    folder = path.split("/")
    assert len(folder) == 3 and folder[0] == "archive"
    assert folder[1] not in (".", "..") and "\\" not in folder[1]
    assert parsed.archive_label == label


def test_every_kind_is_exported_by_its_value() -> None:
    msgs = [message(id=f"id-{k}", kind=k) for k in MAIL_KINDS]
    files, parsed = round_trip(msgs)
    assert {p.rsplit("/", 1)[1].split("-", 3)[3] for p in files} >= {"minutes-alice-to-bob.md"}
    assert sorted(p.kind for p in parsed) == sorted(MAIL_KINDS)


def test_session_and_channel_addresses_round_trip() -> None:
    to_session = message(id="01A", to_kind="session", to_id="vs-01ABC")
    to_channel = message(id="01B", to_kind="channel", to_id="01CHAN")
    files, parsed = round_trip([to_session, to_channel])
    assert "inbox/bob/2026-05-31T1500-task-alice-to-session-vs-01ABC.md" in files
    assert (
        "to: channel:01CHAN\n" in files["inbox/bob/2026-05-31T1500-task-alice-to-channel-01CHAN.md"]
    )
    assert {(p.to_kind, p.to_id) for p in parsed} == {
        ("session", "vs-01ABC"),
        ("channel", "01CHAN"),
    }


def test_the_seed_schema_example_with_comments_parses() -> None:
    text = (
        "---\n"
        "id: msg-W17.3-001 # 全局唯一，格式 msg-<Wave>-<序号>\n"
        "from: ceo\n"
        "to: architect-lin # 单人用 agent-id；广播用 all\n"
        "wave: W17.3\n"
        "kind: task # task | report | handoff | blocker | notice\n"
        "status: pending # pending | read | in_progress | closed\n"
        "created: 2026-05-31T14:30\n"
        "closed: # 处理完毕时填写，YYYY-MM-DDTHHmm\n"
        "related: # 关联消息 id 列表（如本报告对应的 task）\n"
        "- msg-W17.3-000\n"
        "fixes: # 关联 findings-registry 的 finding id（如有）\n"
        "- F-13.5-1\n"
        "---\n"
        "邮件正文（markdown）\n"
    )
    parsed = mr.parse_file(
        "inbox/architect-lin/x.md", text, in_archive=False, folder="architect-lin"
    )
    assert parsed.id == "msg-W17.3-001"
    assert parsed.from_id == "operator"
    assert (parsed.to_kind, parsed.to_id, parsed.recipient_id) == (
        "agent",
        "architect-lin",
        "architect-lin",
    )
    assert parsed.created == datetime(2026, 5, 31, 14, 30, tzinfo=UTC)
    assert parsed.closed_at is None
    assert parsed.related == ["msg-W17.3-000"]
    assert parsed.labels == ["wave:W17.3", "fix:F-13.5-1"]
    assert (parsed.subject, parsed.body) == ("", "邮件正文（markdown）")


def test_compact_closed_time_and_broadcast_to_all_are_read() -> None:
    text = (
        "---\nid: n1\nfrom: ceo\nto: all\nwave: W1\nkind: notice\nstatus: closed\n"
        "created: 2026-05-31T09:05\nclosed: 2026-05-31T1010\nrecipient: bob\n---\n# hi\n"
    )
    parsed = mr.parse_file("archive/W1/x.md", text, in_archive=True, folder="W1")
    assert (parsed.to_kind, parsed.to_id, parsed.recipient_id) == ("broadcast", "*", "bob")
    assert parsed.closed_at == datetime(2026, 5, 31, 10, 10, tzinfo=UTC)
    assert parsed.archive_label == "W1"


def front(**fields: str) -> str:
    """A mailroom file from frontmatter fields (a valid task to bob unless overridden)."""
    values = {
        "id": "x",
        "from": "a",
        "to": "bob",
        "kind": "task",
        "status": "pending",
        "created": "2026-05-31T15:00",
        **fields,
    }
    lines = [f"{k}: {v}" for k, v in values.items() if v != "-"]
    return "---\n" + "\n".join(lines) + "\n---\n"


INVALID = "invalid_mailroom_file"


@pytest.mark.parametrize(
    ("path", "text", "code"),
    [
        ("inbox/bob/a.md", "no frontmatter\n", INVALID),
        ("inbox/bob/a.md", "---\nid: x\n", INVALID),
        ("inbox/bob/a.md", "---\n: [\n---\n", INVALID),
        ("inbox/bob/a.md", "---\n- a list\n---\n", INVALID),
        ("inbox/bob/a.md", front(id="-"), INVALID),
        ("inbox/bob/a.md", front(related="{a: b}"), INVALID),
        ("inbox/bob/a.md", front(kind="gossip"), "unknown_kind"),
        ("inbox/bob/a.md", front(status="lost"), INVALID),
        ("inbox/bob/a.md", front(status="closed"), INVALID),
        ("inbox/bob/a.md", front(recipient="carol"), INVALID),
        ("archive/W1/a.md", front(status="read"), INVALID),
        ("archive/W1/a.md", front(to="all", kind="notice", status="closed"), INVALID),
        ("inbox/bob/a.md", front(created="yesterday"), INVALID),
        ("inbox/bob/a.md", front(ttl="0"), INVALID),
        ("inbox/bob/a.md", front(payload="'[1]'"), INVALID),
        ("inbox/bob/a.md", front(payload="'{not json'"), INVALID),
        ("inbox/bob/a.md", front(to="x:y"), INVALID),
        ("inbox/bob/a.md", front(id="x" * 65), INVALID),
        ("inbox/../a.md", front(), INVALID),
    ],
)
def test_invalid_files_are_refused_naming_the_file(path: str, text: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        mr.parse_files({path: text})
    assert info.value.code == code
    assert repr(path) in info.value.message


def test_paths_outside_the_layout_are_ignored_and_listed() -> None:
    files = mr.export_files([message()])
    files["README.md"] = "# Mailroom\n"
    files["inbox/bob/notes.txt"] = "x"
    files["inbox/bob/deeper/x.md"] = "x"
    parsed = mr.parse_files(files)
    assert len(parsed.messages) == 1
    assert parsed.ignored == ["README.md", "inbox/bob/deeper/x.md", "inbox/bob/notes.txt"]


def test_the_same_id_twice_in_one_mailroom_is_refused() -> None:
    one = mr.export_files([message(id="dup")])
    text = next(iter(one.values()))
    with pytest.raises(InvalidRequest) as info:
        mr.parse_files({"inbox/bob/a.md": text, "inbox/bob/b.md": text})
    assert info.value.code == "duplicate_message_id"


_text = st.text(st.characters(codec="utf-8"), max_size=40)
_word = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    subject=_text,
    body=_text,
    labels=st.lists(_word, max_size=4),
    related=st.lists(_word, max_size=3),
    status=st.sampled_from(["pending", "delivered", "read", "in_progress", "closed", "expired"]),
    kind=st.sampled_from(MAIL_KINDS),
    label=_word,
)
def test_any_message_round_trips(
    subject: str,
    body: str,
    labels: list[str],
    related: list[str],
    status: str,
    kind: str,
    label: str,
) -> None:
    closed = status == "closed"
    msg = message(
        subject=subject,
        body=body,
        labels=labels,
        related=related,
        status=status,
        kind=kind,
        closed_at=T0 if closed else None,
        archive_label=label if closed else None,
    )
    _, [parsed] = round_trip([msg])
    assert parsed.model_dump(exclude={"from_kind", "labels"}) == msg.model_dump(
        exclude={"from_kind", "labels"}
    )
    assert sorted(parsed.labels) == sorted(msg.labels)
