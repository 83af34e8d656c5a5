"""The mailroom directory format (M9): mail as markdown files with YAML frontmatter.

Layout, relative to the mailroom root::

    inbox/<agent-id>/<YYYY-MM-DDTHHmm>-<kind>-<from>-to-<to>.md   open mail (all but closed)
    archive/<label>/<YYYY-MM-DDTHHmm>-<kind>-<from>-to-<to>.md    closed mail, by label

A file is ``---``, the frontmatter keys id, from, to, wave, kind, status, created, closed,
related, fixes (in that order; closed, related and fixes left out when empty), ``---``, then
``# <subject>``, a blank line and the markdown body. Times are UTC to the minute. The operator
is written ``ceo`` and a broadcast's recipient ``all``, as mailroom files have always named
them. Whatever else of a message those ten keys cannot hold is written after them, only when
present (``recipient``, ``subject``, ``labels``, ``parent``, ``correlation``, ``cc``, ``ttl``,
``failure``, ``payload``, then ``from_kind``, ``created_at``, ``delivered_at``, ``read_at``,
``consumed_at``, ``closed_at``, ``idempotency_key``, ``copy_of``, ``copy_reason``,
``all_labels`` and ``seq``), so that export then import is exact (M9); keys a reader does not
know are ignored. ``created`` and ``closed`` stay to the minute as the seed wrote them; the
``*_at`` keys are exact ISO-8601 UTC times to the microsecond and win over them; ``created_at``
and ``closed_at`` are left out when ``created`` and ``closed`` say it all. ``all_labels`` is
written only when ``wave``, ``fixes`` and ``labels`` would read back in another order. Files of
older exports, without these keys, still import. The YAML is written here by hand so the same
messages always give the same bytes.

This module is pure: it turns messages into ``{relative_path: file_text}`` and files back into
messages; the service reads and writes the store.

Its length (over 600 lines) is the format's: writing and reading are kept side by side, key by
key, because an exact round trip depends on the two agreeing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import yaml
from pydantic import BaseModel, Field, ValidationError

from parley.core import mail as m
from parley.core.errors import InvalidRequest
from parley.core.identity import OPERATOR_ID, SYSTEM_ID
from parley.core.limits import MAX_SEQ
from parley.core.mail import Message

OPERATOR_NAME = "ceo"
BROADCAST_NAME = "all"
INBOX = "inbox"
ARCHIVE = "archive"
UNLABELLED = "unlabelled"
FRONTMATTER_KEYS = (
    "id",
    "from",
    "to",
    "wave",
    "kind",
    "status",
    "created",
    "closed",
    "related",
    "fixes",
)
EXTRA_KEYS = (
    "recipient",
    "subject",
    "labels",
    "parent",
    "correlation",
    "cc",
    "ttl",
    "failure",
    "payload",
    "from_kind",
    "created_at",
    "delivered_at",
    "read_at",
    "consumed_at",
    "closed_at",
    "idempotency_key",
    "copy_of",
    "copy_reason",
    "all_labels",
    "seq",
)
# Optional keys whose empty text is a value of its own, not an absent one.
_TEXT_KEYS = frozenset({"parent", "correlation", "failure", "idempotency_key", "copy_of"})
WAVE_PREFIX = "wave:"
FIX_PREFIX = "fix:"
ID_MAX = 64
LABEL_MAX = 200

# A value written without quotes: letters, digits and the punctuation of ids, times and labels,
# never a YAML indicator first and never ': ' or ' #' inside.
_PLAIN = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.+/@-]*(?::[A-Za-z0-9_.+/@-]+)*")
# Characters YAML may not hold raw in a double-quoted scalar: the quote and the backslash, and all
# but the printable ones; NEL and the Unicode line and paragraph separators are line breaks to a
# YAML 1.1 reader, so they are escaped too. One regex pass over the text, not a loop per character:
# a payload can be large.
_NEEDS_ESCAPE = re.compile(
    r'["\\]|[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]'
)
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t"}
_SEGMENT_UNSAFE = re.compile(r'[\x00-\x1f\x7f/\\%:*?"<>|]')
_NAME_UNSAFE = re.compile(r"[^\w.-]+")
_COMPACT_MINUTE = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2})(\d{2})")


# libyaml's parser when it is there: the pure-Python one reads a file a character at a time.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StringLoader(_SafeLoader):  # type: ignore[misc]
    """SafeLoader without implicit typing: every scalar stays the string it was written as, so
    ``created: 2026-05-31T14:30`` is not turned into a datetime nor ``id: 001`` into 1."""


_StringLoader.yaml_implicit_resolvers = {}


class ImportResult(BaseModel):
    """What an import did. A message whose id the hub already holds is skipped, never
    overwritten, so importing the same mailroom twice is harmless."""

    imported: int
    skipped: int
    skipped_ids: list[str] = Field(default_factory=list)
    ignored: list[str] = Field(
        default_factory=list, description="paths outside inbox/<id>/*.md and archive/<label>/*.md"
    )


class ParsedMailroom(BaseModel):
    messages: list[Message]
    ignored: list[str]
    guessed_from_kind: set[str] = Field(
        default_factory=set,
        description="ids of messages whose file has no from_kind (older exports): a guess",
    )


# -- export ----------------------------------------------------------------------------------


def export_files(messages: Iterable[Message]) -> dict[str, str]:
    """Render messages as mailroom files, keyed by relative path in sorted order.

    Names that collide in one folder get ``-2``, ``-3``… in the order (created minute, id): the
    minute is all a seed-era file keeps of the time, so a re-export of imported files, old or
    new, numbers them the same way.
    """
    by_folder: dict[str, list[tuple[str, str, Message]]] = {}
    for msg in messages:
        by_folder.setdefault(folder_of(msg), []).append((base_name(msg), _minute(msg.created), msg))
    files: dict[str, str] = {}
    for folder, entries in by_folder.items():
        taken: set[str] = set()
        for base, _, msg in sorted(entries, key=lambda e: (e[0], e[1], e[2].id)):
            name = f"{base}.md"
            n = 1
            while name in taken:
                n += 1
                name = f"{base}-{n}.md"
            taken.add(name)
            files[f"{folder}/{name}"] = render(msg)
    return dict(sorted(files.items()))


def folder_of(msg: Message) -> str:
    """``inbox/<recipient>`` for open mail, ``archive/<label>`` for closed mail."""
    if msg.status == "closed":
        return f"{ARCHIVE}/{encode_segment(msg.archive_label or UNLABELLED)}"
    return f"{INBOX}/{encode_segment(name_of(msg.recipient_id))}"


def base_name(msg: Message) -> str:
    """``<YYYY-MM-DDTHHmm>-<kind>-<from>-to-<to>`` (UTC), without the extension."""
    stamp = _minute(msg.created).replace(":", "")
    sender = _name_part(name_of(msg.from_id))
    to = _name_part(address_of(msg))
    return f"{stamp}-{msg.kind}-{sender}-to-{to}"


def name_of(principal_id: str) -> str:
    """A principal as the mailroom names it: the operator is ``ceo``."""
    return OPERATOR_NAME if principal_id == OPERATOR_ID else principal_id


def address_of(msg: Message) -> str:
    """The ``to`` of a message as the mailroom writes it."""
    return address_of_parts(msg.to_kind, msg.to_id)


def render(msg: Message) -> str:
    """One message as a mailroom file."""
    wave, fixes, labels = _split_labels(msg.labels)
    # What the reader rebuilds from wave, fixes and labels; all_labels keeps any other order.
    wave_label = [f"{WAVE_PREFIX}{wave}"] if wave is not None else []
    rebuilt = [f"{FIX_PREFIX}{fix}" for fix in fixes] + labels
    fields: list[tuple[str, str | list[str] | None]] = [
        ("id", msg.id),
        ("from", name_of(msg.from_id)),
        ("to", address_of(msg)),
        ("wave", wave),
        ("kind", msg.kind),
        ("status", msg.status),
        ("created", _minute(msg.created)),
    ]
    if msg.closed_at is not None:
        fields.append(("closed", _minute(msg.closed_at)))
    if msg.related:
        fields.append(("related", list(msg.related)))
    if fixes:
        fields.append(("fixes", fixes))
    # The archive folder names a label, not an inbox: say whose mail it was unless `to` does.
    if msg.status == "closed" and not (msg.to_kind == "agent" and msg.to_id == msg.recipient_id):
        fields.append(("recipient", name_of(msg.recipient_id)))
    heading = _heading_fits(msg.subject, msg.body)
    if not heading:
        fields.append(("subject", msg.subject))
    optional: list[tuple[str, str | list[str] | None]] = [
        ("labels", labels),
        ("parent", msg.parent_message_id),
        ("correlation", msg.correlation_id),
        ("cc", [name_of(c) for c in msg.cc]),
        ("ttl", None if msg.ttl_seconds == m.DEFAULT_TTL_SECONDS else str(msg.ttl_seconds)),
        ("failure", msg.failure_reason),
        ("payload", _payload_text(msg.payload) if msg.payload else None),
        ("from_kind", msg.from_kind),
        ("created_at", None if _whole_minute(msg.created) else _exact(msg.created)),
        ("delivered_at", _exact(msg.delivered_at)),
        ("read_at", _exact(msg.read_at)),
        ("consumed_at", _exact(msg.consumed_at)),
        ("closed_at", None if _whole_minute(msg.closed_at) else _exact(msg.closed_at)),
        ("idempotency_key", msg.idempotency_key),
        ("copy_of", msg.copy_of),
        ("copy_reason", msg.copy_reason),
        ("all_labels", None if [*wave_label, *rebuilt] == msg.labels else list(msg.labels)),
        ("seq", str(msg.seq) if msg.seq else None),
    ]
    # An empty text is a value (a failure reason of ""); an empty list is no value.
    fields += [(k, v) for k, v in optional if v or (isinstance(v, str) and k in _TEXT_KEYS)]
    lines = ["---"]
    for key, value in fields:
        lines += _yaml_lines(key, value)
    lines.append("---")
    return "\n".join(lines) + "\n" + _markdown(msg.subject, msg.body, heading=heading)


def _split_labels(labels: list[str]) -> tuple[str | None, list[str], list[str]]:
    wave: str | None = None
    fixes: list[str] = []
    rest: list[str] = []
    for label in labels:
        if wave is None and label.startswith(WAVE_PREFIX) and len(label) > len(WAVE_PREFIX):
            wave = label[len(WAVE_PREFIX) :]
        elif label.startswith(FIX_PREFIX) and len(label) > len(FIX_PREFIX):
            fixes.append(label[len(FIX_PREFIX) :])
        else:
            rest.append(label)
    return wave, fixes, rest


def _minute(at: datetime) -> str:
    # isoformat, not strftime: strftime writes year 1 as '1', which no reader parses.
    return at.astimezone(UTC).isoformat(timespec="minutes")[:16]


def _whole_minute(at: datetime | None) -> bool:
    """Whether the seed's minute says all of the time (an absent time needs no exact key)."""
    return at is None or (at.second == 0 and at.microsecond == 0)


def _exact(at: datetime | None) -> str | None:
    """A time as exact ISO-8601 UTC, to the microsecond: ``2026-05-31T14:30:59.123456Z``."""
    if at is None:
        return None
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _payload_text(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, sort_keys=True)


def _yaml_lines(key: str, value: str | list[str] | None) -> list[str]:
    if value is None:
        return [f"{key}:"]
    if isinstance(value, list):
        return [f"{key}:", *(f"- {_scalar(v)}" for v in value)]
    return [f"{key}: {_scalar(value)}"]


def _scalar(value: str) -> str:
    """A string as a YAML scalar: plain when that reads back unchanged, else double-quoted."""
    if _PLAIN.fullmatch(value):
        return value
    return '"' + _NEEDS_ESCAPE.sub(_escape, value) + '"'


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    return (
        f"\\x{code:02x}"
        if code <= 0xFF
        else f"\\u{code:04x}"
        if code <= 0xFFFF
        else f"\\U{code:08x}"
    )


def _looks_like_heading(text: str) -> bool:
    first = text.split("\n", 1)[0].rstrip("\r")
    return first == "#" or first.startswith("# ")


def _heading_fits(subject: str, body: str) -> bool:
    """Whether the subject can ride as the ``# `` line: it must be one line, and an empty
    subject must not let the body's own first heading be read back as the subject."""
    if "\n" in subject or "\r" in subject:
        return False
    return bool(subject) or not _looks_like_heading(body)


def _markdown(subject: str, body: str, *, heading: bool) -> str:
    if heading and subject:
        return f"# {subject}\n" + (f"\n{body}\n" if body else "")
    return f"{body}\n" if body else ""


def encode_segment(name: str) -> str:
    """A folder name that cannot escape its parent or break a file system: '/', '\\', '%',
    ':' and control characters are percent-encoded, and so is a leading '.'."""
    out = _SEGMENT_UNSAFE.sub(lambda c: "".join(f"%{b:02X}" for b in c.group().encode()), name)
    return "%2E" + out[1:] if out.startswith(".") else out


def _name_part(name: str) -> str:
    return _NAME_UNSAFE.sub("-", name)


# -- import ----------------------------------------------------------------------------------


def parse_files(files: Mapping[str, str]) -> ParsedMailroom:
    """Parse mailroom files into messages (``from_kind`` a guess the service refines where the
    file does not state it, ``seq`` 0 where it does not state it).

    Paths outside ``inbox/<id>/*.md`` and ``archive/<label>/*.md`` are listed as ignored; a file
    in those folders that is not valid refuses the whole import, naming the file.
    """
    messages: list[Message] = []
    ignored: list[str] = []
    guessed: set[str] = set()
    seen: dict[str, str] = {}
    for path in sorted(files):
        parts = path.split("/")
        if len(parts) != 3 or parts[0] not in (INBOX, ARCHIVE) or not parts[2].endswith(".md"):
            ignored.append(path)
            continue
        if parts[1] in ("", ".", ".."):
            raise _invalid(path, f"folder {parts[1]!r} is not an agent id or a label")
        folder = unquote(parts[1])
        msg, stated = _parse(path, files[path], in_archive=parts[0] == ARCHIVE, folder=folder)
        if not stated:
            guessed.add(msg.id)
        if msg.id in seen:
            raise InvalidRequest(
                f"message id {msg.id!r} appears in both {seen[msg.id]!r} and {path!r}; "
                "each message must be in exactly one file",
                code="duplicate_message_id",
                id=msg.id,
            )
        seen[msg.id] = path
        messages.append(msg)
    return ParsedMailroom(messages=messages, ignored=ignored, guessed_from_kind=guessed)


def parse_file(path: str, text: str, *, in_archive: bool, folder: str) -> Message:
    """One mailroom file as a message; ``folder`` is the decoded inbox owner or archive label."""
    return _parse(path, text, in_archive=in_archive, folder=folder)[0]


def _parse(path: str, text: str, *, in_archive: bool, folder: str) -> tuple[Message, bool]:
    """A file as a message, and whether the file stated the sender's kind."""
    front, markdown = _split_front(path, text)
    try:
        data = yaml.load(front, Loader=_StringLoader)
    except yaml.YAMLError as exc:
        raise _invalid(path, f"its frontmatter is not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise _invalid(path, "its frontmatter is not a mapping of keys to values")
    f = _Fields(path, data)
    kind = f.required("kind")
    if kind not in m.MAIL_KINDS:
        raise _invalid(
            path, f"kind {kind!r} is unknown; use one of {', '.join(m.MAIL_KINDS)}", "unknown_kind"
        )
    status = f.required("status")
    if status not in m.MAIL_STATUSES:
        raise _invalid(
            path, f"status {status!r} is unknown; use one of {', '.join(m.MAIL_STATUSES)}"
        )
    to_kind, to_id = _address(path, f.required("to"))
    recipient = f.optional("recipient")
    recipient_id = _principal(recipient) if recipient else None
    if in_archive:
        if status != "closed":
            raise _invalid(path, f"it is {status!r} but lies in archive/; archived mail is closed")
        if recipient_id is None:
            if to_kind != "agent":
                raise _invalid(
                    path,
                    f"it was sent to {address_of_parts(to_kind, to_id)!r} and lies in "
                    "archive/ without a 'recipient' key saying whose inbox it was in",
                )
            recipient_id = to_id
        archive_label: str | None = folder
    else:
        if status == "closed":
            raise _invalid(path, "it is closed but lies in inbox/; closed mail belongs in archive/")
        owner = _principal(folder)
        if recipient_id is not None and recipient_id != owner:
            raise _invalid(path, f"its recipient {recipient!r} is not the inbox owner {folder!r}")
        recipient_id, archive_label = owner, None
    subject_key = f.optional("subject", allow_empty=True)
    subject, body = _split_markdown(markdown, subject_key)
    wave = f.optional("wave")
    labels = [f"{WAVE_PREFIX}{wave}"] if wave else []
    labels += [f"{FIX_PREFIX}{fix}" for fix in f.strings("fixes")]
    labels += f.strings("labels")
    all_labels = f.strings("all_labels")
    from_id = _principal(f.required("from"))
    from_kind = f.optional("from_kind")
    values: dict[str, Any] = {
        "id": f.required("id"),
        "created": f.time("created_at", required=False) or f.time("created", required=True),
        "ttl_seconds": f.ttl(),
        "from_kind": from_kind or _guess_from_kind(from_id),
        "from_id": from_id,
        "to_kind": to_kind,
        "to_id": to_id,
        "recipient_id": recipient_id,
        "cc": [_principal(c) for c in f.strings("cc")],
        "kind": kind,
        "subject": subject,
        "body": body,
        "payload": f.payload(),
        "parent_message_id": f.optional("parent", allow_empty=True),
        "correlation_id": f.optional("correlation", allow_empty=True),
        "related": f.strings("related"),
        "labels": all_labels if "all_labels" in f.data else labels,
        "status": status,
        "delivered_at": f.time("delivered_at", required=False),
        "read_at": f.time("read_at", required=False),
        "consumed_at": f.time("consumed_at", required=False),
        "closed_at": f.time("closed_at", required=False) or f.time("closed", required=False),
        "failure_reason": f.optional("failure", allow_empty=True),
        "idempotency_key": f.optional("idempotency_key", allow_empty=True),
        "archive_label": archive_label,
        "copy_of": f.optional("copy_of", allow_empty=True),
        "copy_reason": f.optional("copy_reason"),
        "seq": f.seq(),
    }
    _check_lengths(path, values)
    try:
        msg = Message.model_validate(values)
    except ValidationError as exc:
        raise _invalid(path, str(exc)) from exc
    try:
        _ = msg.expires_at  # a 'created' near year 9999 plus the ttl overflows the calendar
    except OverflowError:
        raise _invalid(path, "its 'created' time plus its 'ttl' lies beyond year 9999") from None
    return msg, from_kind is not None


def address_of_parts(to_kind: str, to_id: str) -> str:
    """A recipient address as the mailroom writes it: ``all``, an agent id, or ``<kind>:<id>``."""
    if to_kind == "broadcast":
        return BROADCAST_NAME
    return name_of(to_id) if to_kind == "agent" else f"{to_kind}:{to_id}"


def _invalid(path: str, why: str, code: str = "invalid_mailroom_file") -> InvalidRequest:
    return InvalidRequest(f"mailroom file {path!r} cannot be imported: {why}", code=code, path=path)


def _split_front(path: str, text: str) -> tuple[str, str]:
    lines = text.removeprefix("\ufeff").split("\n")
    if lines[0].rstrip("\r") != "---":
        raise _invalid(path, "it does not start with a '---' frontmatter line")
    for end in range(1, len(lines)):
        if lines[end].rstrip("\r") == "---":
            return "\n".join(lines[1:end]), "\n".join(lines[end + 1 :])
    raise _invalid(path, "its frontmatter has no closing '---' line")


def _split_markdown(markdown: str, subject: str | None) -> tuple[str, str]:
    """Subject and body from the markdown after the frontmatter (see ``_markdown``)."""
    if subject is not None:
        return subject, markdown.removesuffix("\n")
    first, _, rest = markdown.partition("\n")
    line = first.rstrip("\r")
    if not (line == "#" or line.startswith("# ")):
        return "", markdown.removesuffix("\n")
    # One blank line separates the heading from the body; files written by hand may omit it.
    if rest.startswith("\r\n"):
        rest = rest[2:]
    elif rest.startswith("\n"):
        rest = rest[1:]
    return line[2:], rest.removesuffix("\n")


def _principal(name: str) -> str:
    return OPERATOR_ID if name == OPERATOR_NAME else name


def _address(path: str, to: str) -> tuple[m.ToKind, str]:
    if to == OPERATOR_NAME:
        return "agent", OPERATOR_ID
    try:
        return m.parse_address(to)
    except InvalidRequest as exc:
        raise _invalid(path, exc.message) from exc


def _guess_from_kind(from_id: str) -> m.FromKind:
    if from_id == OPERATOR_ID:
        return "human"
    return "system" if from_id == SYSTEM_ID else "agent"


def _check_lengths(path: str, values: dict[str, Any]) -> None:
    limits = {
        "id": ID_MAX,
        "from_id": ID_MAX,
        "to_id": ID_MAX,
        "recipient_id": ID_MAX,
        "parent_message_id": ID_MAX,
        "correlation_id": LABEL_MAX,
        "archive_label": LABEL_MAX,
        "idempotency_key": LABEL_MAX,
        "copy_of": ID_MAX,
    }
    for key, limit in limits.items():
        value = values[key]
        if value is not None and len(value) > limit:
            raise _invalid(path, f"{key} {value[:80]!r}… is longer than {limit} characters")


class _Fields:
    """Typed access to one file's frontmatter, refusing with the file's name."""

    def __init__(self, path: str, data: dict[Any, Any]) -> None:
        self.path = path
        self.data = data

    def optional(self, key: str, *, allow_empty: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None or (value == "" and not allow_empty):
            return None
        if not isinstance(value, str):
            raise _invalid(self.path, f"'{key}' must be a single value, not {value!r}")
        return value

    def required(self, key: str) -> str:
        value = self.optional(key)
        if value is None:
            raise _invalid(self.path, f"it has no '{key}'; every mailroom file needs one")
        return value

    def strings(self, key: str) -> list[str]:
        value = self.data.get(key)
        if value is None or value == "":
            return []
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _invalid(self.path, f"'{key}' must be a list of values, not {value!r}")
        return list(value)

    def time(self, key: str, *, required: bool) -> datetime | None:
        text = self.required(key) if required else self.optional(key)
        if text is None:
            return None
        compact = _COMPACT_MINUTE.fullmatch(text)
        if compact:
            text = f"{compact[1]}T{compact[2]}:{compact[3]}"
        try:
            at = datetime.fromisoformat(text)
            # The hub is UTC; a time written without an offset is taken as UTC. Converting a
            # time at the edge of the calendar (year 1 or 9999 with an offset) overflows.
            return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        except (ValueError, OverflowError) as exc:
            raise _invalid(
                self.path,
                f"'{key}' {text!r} is not a time; write YYYY-MM-DDTHH:MM (UTC) or an exact "
                "ISO-8601 time such as 2026-05-31T14:30:59.123456Z",
            ) from exc

    def seq(self) -> int:
        """The inbox position the mail had where it was exported (0 when not written)."""
        text = self.optional("seq")
        if text is None:
            return 0
        if not (text.isascii() and text.isdigit() and len(text) <= 10 and int(text) <= MAX_SEQ):
            raise _invalid(
                self.path, f"'seq' {text!r} is not an inbox position from 0 to {MAX_SEQ}"
            )
        return int(text)

    def ttl(self) -> int:
        text = self.optional("ttl")
        if text is None:
            return m.DEFAULT_TTL_SECONDS
        # The length check first: int() refuses thousands of digits with an error of its own.
        digits = text.isascii() and text.isdigit() and len(text) <= 10
        if not digits or not 1 <= int(text) <= m.MAX_TTL_SECONDS:
            raise _invalid(
                self.path,
                f"'ttl' {text!r} is not a number of seconds from 1 to {m.MAX_TTL_SECONDS}",
            )
        return int(text)

    def payload(self) -> dict[str, Any]:
        text = self.optional("payload")
        if text is None:
            return {}
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise _invalid(self.path, f"'payload' is not JSON ({exc})") from exc
        if not isinstance(value, dict):
            raise _invalid(self.path, "'payload' must be a JSON object")
        return value
