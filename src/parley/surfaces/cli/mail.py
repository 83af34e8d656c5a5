"""``parley mail …``: send, read and move mail through its lifecycle, summaries, live inbox."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.panel import Panel
from rich.text import Text

from parley.core.mail_kinds import DEFAULT_TTL_SECONDS, MAIL_KINDS
from parley.surfaces.cli.client import FULL_CHANNEL_ID, FULL_SESSION_ID, HubClient
from parley.surfaces.cli.output import (
    JsonFlag,
    age,
    client,
    console,
    ctrl_c_stops_watching,
    emit,
    fields,
    json_object,
    print_event,
    table,
    wants_json,
    when,
    when_short,
)

mail_app = typer.Typer(help="Durable mail between agents and humans.", no_args_is_help=True)

MessageId = Annotated[str, typer.Argument(metavar="MESSAGE_ID", help="The message's id.")]
Label = Annotated[str | None, typer.Option(help="Archive label, e.g. a wave.")]


def read_body(body: str | None, body_file: Path | None) -> str:
    if body is not None and body_file is not None:
        raise typer.BadParameter("give --body or --body-file, not both", param_hint="--body")
    if body_file is None:
        return body or ""
    if str(body_file) == "-":
        return sys.stdin.read()
    try:
        return body_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {str(body_file)!r}: {exc.strerror}") from exc


def my_id(hub: HubClient) -> str:
    return str(hub.get("/v1/whoami")["id"])


def mail_rows(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            m["id"],
            when_short(m.get("created")),
            m.get("from_id"),
            m.get("recipient_id"),
            m.get("kind"),
            m.get("status"),
            m.get("subject"),
            ", ".join(m.get("labels") or []),
        )
        for m in messages
    ]


MAIL_COLUMNS = ["id", "created", "from", "to", "kind", "status", "subject", "labels"]


def render_message(m: dict[str, Any]) -> None:
    fields(
        f"{m['kind']} {m['id']}",
        [
            ("from", f"{m.get('from_id')} ({m.get('from_kind')})"),
            ("to", f"{m.get('recipient_id')} (sent to {m.get('to_kind')} {m.get('to_id')})"),
            ("cc", m.get("cc")),
            ("subject", m.get("subject")),
            ("status", m.get("status")),
            ("created", when(m.get("created"))),
            ("read", when(m.get("read_at"))),
            ("closed", when(m.get("closed_at"))),
            ("archive label", m.get("archive_label")),
            ("labels", m.get("labels")),
            ("related", m.get("related")),
            ("parent", m.get("parent_message_id")),
            ("correlation", m.get("correlation_id")),
            ("copy of", m.get("copy_of")),
            ("failure", m.get("failure_reason")),
            ("payload", m.get("payload")),
        ],
    )
    if m.get("body"):
        # Imported here: the Markdown renderer is a tenth of the CLI's start-up (Q7).
        from rich.markdown import Markdown

        console.print(Panel(Markdown(m["body"]), border_style="dim"))


def render_changed(m: dict[str, Any]) -> None:
    label = f" under {m['archive_label']!r}" if m.get("archive_label") else ""
    console.print(Text(f"{m['id']} is now {m['status']}{label}"))


def address(hub: HubClient, to: str) -> str:
    """A recipient as the hub takes it: ``channel:design`` → ``channel:<its id>``, and a
    session by its name or id start → ``session:<its id>``; anything else as given."""
    kind, sep, ref = to.partition(":")
    if sep and kind == "channel":
        return f"channel:{hub.channel_id(ref)}"
    if sep and kind == "session" and not FULL_SESSION_ID.fullmatch(ref):
        found = hub.get(f"/v1/sessions/{quote(ref, safe='')}/topology")
        return f"session:{found['session']['id']}"
    return to


def message_id(hub: HubClient, ref: str | None) -> str | None:
    """A message reference (an id or the start of one) as the message's full id."""
    if ref is None or FULL_CHANNEL_ID.fullmatch(ref):
        return ref
    return str(hub.get(f"/v1/mail/{quote(ref, safe='')}")["id"])


@mail_app.command("send")
def send(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Argument(
            help="Agent or human id, 'channel:<channel>' (its name, id or id start), "
            "'session:<session>' (likewise) or '*'."
        ),
    ],
    kind: Annotated[str, typer.Option(help=f"One of: {', '.join(MAIL_KINDS)}.")] = "notice",
    subject: Annotated[str, typer.Option(help="Subject line.")] = "",
    body: Annotated[str | None, typer.Option(help="Markdown body.")] = None,
    body_file: Annotated[
        Path | None, typer.Option("--body-file", help="Read the body from a file ('-': stdin).")
    ] = None,
    cc: Annotated[
        list[str] | None, typer.Option(help="Copy to this agent or human (repeatable).")
    ] = None,
    label: Annotated[list[str] | None, typer.Option(help="Tag (repeatable).")] = None,
    related: Annotated[list[str] | None, typer.Option(help="Related id (repeatable).")] = None,
    parent: Annotated[
        str | None, typer.Option(help="The message this replies to (its id or id start).")
    ] = None,
    correlation: Annotated[str | None, typer.Option(help="Correlation id.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="A resend with the same key returns the original.")
    ] = None,
    ttl: Annotated[int, typer.Option(help="Seconds until the message expires.")] = (
        DEFAULT_TTL_SECONDS
    ),
    payload: Annotated[str | None, typer.Option(help="A JSON object sent along.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Send mail as the caller."""
    hub = client(ctx)
    request: dict[str, Any] = {
        "to": address(hub, to),
        "kind": kind,
        "subject": subject,
        "body": read_body(body, body_file),
        "cc": cc or [],
        "labels": label or [],
        "related": related or [],
        "parent_message_id": message_id(hub, parent),
        "correlation_id": correlation,
        "idempotency_key": idempotency_key,
        "ttl_seconds": ttl,
    }
    if payload is not None:
        request["payload"] = json_object(payload, "--payload")
    response = hub.exchange("POST", "/v1/mail", json_body=request)
    sent = response.json()
    # A resend with a known idempotency key sent nothing: the hub answers with the original.
    replayed = response.headers.get("Idempotent-Replayed") == "true"
    if replayed:
        sent["replayed"] = True
    done = "already sent (idempotent resend; nothing sent again):" if replayed else "sent"
    # Mail to a channel or to everyone is a copy per recipient: the answer is the first copy,
    # so the line names what was addressed rather than that copy's recipient.
    many = to == "*" or to.startswith("channel:")
    emit(
        ctx,
        as_json,
        sent,
        lambda m: console.print(
            Text(f"{done} {m['kind']} {m['id']} to {to if many else m['recipient_id']}")
        ),
    )


@mail_app.command("inbox")
def inbox(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Argument(help="Whose inbox (default: yours).")] = None,
    unread: Annotated[bool, typer.Option(help="Only mail not read yet.")] = False,
    kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
    status: Annotated[list[str] | None, typer.Option(help="Only these statuses.")] = None,
    label: Annotated[str | None, typer.Option(help="Only mail with this label.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include closed and archived mail.")] = False,
    after_seq: Annotated[
        int | None, typer.Option(min=0, help="Start after this inbox position.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 100,
    as_json: JsonFlag = False,
) -> None:
    """An inbox in delivery order, up to --limit messages (the hub's pages followed)."""
    hub = client(ctx)
    owner = agent or my_id(hub)
    messages: list[dict[str, Any]] = []
    more = False
    for rows, more in hub.pages(
        f"/v1/agents/{owner}/inbox",
        unread=unread or None,
        kind=kind,
        status=status or None,
        label=label,
        include_archived=all_ or None,
        after_seq=after_seq,
        limit=limit,
    ):
        messages += rows
        if len(messages) >= limit:
            more = more or len(messages) > limit
            messages = messages[:limit]
            break
    emit(
        ctx,
        as_json,
        messages,
        # The owner is in the title: at 80 columns "to" and the labels go first.
        lambda ms: table(f"inbox of {owner}", MAIL_COLUMNS, mail_rows(ms), drop=("to", "labels")),
    )
    if more:
        # Never lose mail silently: say where the rest begins (on stderr, so --json stays JSON).
        sys.stderr.write(f"more mail follows; list it with --after-seq {messages[-1]['seq']}\n")


@mail_app.command("show")
def show(ctx: typer.Context, message_id: MessageId, as_json: JsonFlag = False) -> None:
    """One message with its body."""
    emit(ctx, as_json, client(ctx).get(f"/v1/mail/{message_id}"), render_message)


@mail_app.command("thread")
def thread(ctx: typer.Context, message_id: MessageId, as_json: JsonFlag = False) -> None:
    """Replies, the same correlation id and related messages."""
    messages = client(ctx).get(f"/v1/mail/{message_id}/thread")
    emit(
        ctx,
        as_json,
        messages,
        lambda ms: table("thread", MAIL_COLUMNS, mail_rows(ms), drop=("labels",)),
    )


def move(
    ctx: typer.Context, message_id: str, status: str, label: str | None, as_json: bool
) -> None:
    body: dict[str, Any] = {"status": status}
    if label is not None:
        body["label"] = label
    emit(ctx, as_json, client(ctx).post(f"/v1/mail/{message_id}/status", body), render_changed)


@mail_app.command("ack")
def ack(ctx: typer.Context, message_id: MessageId, as_json: JsonFlag = False) -> None:
    """Acknowledge: mark your message read (the operator: anyone's)."""
    move(ctx, message_id, "read", None, as_json)


@mail_app.command("start")
def start(ctx: typer.Context, message_id: MessageId, as_json: JsonFlag = False) -> None:
    """Mark your message in progress (the operator: anyone's)."""
    move(ctx, message_id, "in_progress", None, as_json)


@mail_app.command("close")
def close(
    ctx: typer.Context, message_id: MessageId, label: Label = None, as_json: JsonFlag = False
) -> None:
    """Close your message: it is done, leaves the inbox and is archived (under --label when
    given). The last step of mail; the operator may close anyone's."""
    move(ctx, message_id, "closed", label, as_json)


# ``close`` archives: one verb. ``archive`` stays, unlisted, for the scripts that use it.
@mail_app.command("archive", hidden=True)
def archive(
    ctx: typer.Context, message_id: MessageId, label: Label = None, as_json: JsonFlag = False
) -> None:
    """The same as close: close your message, which archives it (under --label when given)."""
    archived = client(ctx).post(f"/v1/mail/{message_id}/archive", {"label": label})
    emit(ctx, as_json, archived, render_changed)


@mail_app.command("redeliver")
def redeliver(ctx: typer.Context, message_id: MessageId, as_json: JsonFlag = False) -> None:
    """Put a pending copy of an archived message back in its inbox (operator)."""
    copy = client(ctx).post(f"/v1/mail/{message_id}/redeliver")
    emit(
        ctx,
        as_json,
        copy,
        lambda m: console.print(Text(f"redelivered as {m['id']} to {m['recipient_id']}")),
    )


@mail_app.command("summary")
def summary(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Argument(help="Whose summary (default: yours; for the operator, every agent)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Unread and in-progress counts, age of the oldest pending message, open blockers."""
    hub = client(ctx)
    data: Any
    if agent is not None:
        data = hub.get(f"/v1/agents/{agent}/summary")
        rows = [data]
    else:
        me = hub.get("/v1/whoami")
        owners = [me["id"]]
        if me.get("role") == "operator":
            owners += [a["id"] for a in hub.get("/v1/agents")]
        rows = [hub.get(f"/v1/agents/{owner}/summary") for owner in owners]
        data = rows if len(rows) > 1 else rows[0]

    def render(_: Any) -> None:
        table(
            "mail summary",
            ["agent", "unread", "in progress", "oldest pending", "open blockers", "open"],
            [
                (
                    s["agent_id"],
                    s["unread"],
                    s["in_progress"],
                    age(s.get("oldest_pending_age_s")),
                    s["open_blockers"],
                    s["total_open"],
                )
                for s in rows
            ],
        )

    emit(ctx, as_json, data, render)


@mail_app.command("watch")
def watch(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Argument(help="Whose inbox (default: yours).")] = None,
    after: Annotated[
        int | None, typer.Option(help="Start after this inbox position (default: all).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Follow an inbox live: its mail so far, then new mail as it arrives (Ctrl+C stops)."""
    hub = client(ctx)
    owner = agent or my_id(hub)
    machine = wants_json(ctx, as_json)
    if not machine:
        console.print(f"[dim]watching the inbox of {owner}; Ctrl+C stops[/dim]")
    last = str(after) if after is not None else None
    with ctrl_c_stops_watching():
        for event in hub.stream(f"/v1/agents/{owner}/inbox/stream", last_id=last):
            if event.event != "mail":
                continue
            m = event.json()
            if machine:
                print_event("mail", m)
                continue
            line = Text()
            line.append(f"{when(m.get('created'))} ", style="dim")
            line.append(f"{m.get('kind')} ", style="bold")
            line.append(f"from {m.get('from_id')}: {m.get('subject') or '(no subject)'} ")
            line.append(f"[{m.get('status')}] {m['id']}", style="dim")
            console.print(line)
