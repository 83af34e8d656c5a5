"""``parley channel …`` and ``parley task …``: channels, their transcripts and discussion tasks."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.text import Text

from parley.core.names import short_ids
from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    ctrl_c_stops_watching,
    emit,
    fields,
    table,
    wants_json,
    when,
    when_short,
)
from parley.surfaces.cli.transcript import BACKLOG, TranscriptView, task_state, watch_channel

channel_app = typer.Typer(help="Channels and their transcripts.", no_args_is_help=True)
task_app = typer.Typer(help="Discussion tasks: one run of speaking turns.", no_args_is_help=True)
invitation_app = typer.Typer(
    help="Invitations into channels: an agent joins only when it accepts.", no_args_is_help=True
)

ChannelId = Annotated[
    str,
    typer.Argument(
        metavar="CHANNEL_ID", help="The channel: its name, its id, or the start of its id."
    ),
]
TaskId = Annotated[str, typer.Argument(metavar="TASK_ID")]
Members = Annotated[list[str] | None, typer.Option("--member", help="A member (repeatable).")]
Latest = Annotated[int, typer.Option(help="How many earlier messages to show first.", min=0)]


def render_channel(c: dict[str, Any]) -> None:
    meta = c.get("metadata") or {}
    fields(
        f"{c['kind']} channel {c['id']}",
        [
            ("name", c.get("name")),
            ("status", c.get("status")),
            ("members", c.get("members")),
            ("private", "yes" if c.get("private") else None),
            ("rounds", c.get("discussion_rounds")),
            ("owner agent", c.get("owner_agent_id")),
            ("created by", c.get("created_by")),
            ("created", when(c.get("created"))),
            ("messages", c.get("last_seq")),
            *((f"metadata.{k}", v) for k, v in meta.items()),
        ],
    )


def channel_rows(channels: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    # Short ids: each is enough to address its channel (as is its name).
    short = short_ids(c["id"] for c in channels)
    return [
        (
            short[c["id"]],
            c.get("name"),
            c.get("kind"),
            c.get("status"),
            ", ".join(c.get("members") or []),
            c.get("last_seq"),
        )
        for c in channels
    ]


def render_task(t: dict[str, Any], channel_name: str | None = None) -> None:
    channel = t.get("channel_id")
    fields(
        f"task {t['id']}",
        [
            ("channel", f"#{channel_name} ({channel})" if channel_name else channel),
            ("mode", t.get("mode")),
            ("status", t.get("status")),
            ("end reason", t.get("end_reason")),
            ("members", t.get("members")),
            ("round", f"{t.get('current_round', 0)}/{t.get('rounds')}"),
            ("calls", t.get("calls")),
            ("accepted", t.get("accepted")),
            ("failed member", t.get("failed_member")),
            ("error", t.get("error")),
            ("trigger", t.get("trigger_id")),
            ("created", when(t.get("created"))),
            ("finished", when(t.get("finished"))),
        ],
    )


def render_posted(data: dict[str, Any]) -> None:
    message = data.get("message") or {}
    line = f"posted {message.get('id')} (#{message.get('seq')})"
    if data.get("task_id"):
        line += f"; task {data['task_id']} started"
    console.print(Text(line))


@channel_app.command("list")
def list_channels(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Channels you are a member of or created (all, for the operator)."""
    channels = [c for page, _ in client(ctx).pages("/v1/channels") for c in page]
    columns = ["id", "name", "kind", "status", "members", "messages"]
    emit(ctx, as_json, channels, lambda cs: table("channels", columns, channel_rows(cs)))


@channel_app.command("show")
def show(ctx: typer.Context, channel_id: ChannelId, as_json: JsonFlag = False) -> None:
    """One channel with its members and metadata."""
    emit(ctx, as_json, client(ctx).get(f"/v1/channels/{channel_id}"), render_channel)


@channel_app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(help="Channel name.")],
    member: Members = None,
    kind: Annotated[str, typer.Option(help="group or direct.")] = "group",
    rounds: Annotated[
        int | None, typer.Option(help="Discussion rounds per task (1-5).", min=1, max=5)
    ] = None,
    private: Annotated[bool, typer.Option(help="Visible to members only.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Create a group or direct channel."""
    if kind not in ("group", "direct"):
        raise typer.BadParameter(f"{kind!r} is not 'group' or 'direct'", param_hint="--kind")
    body: dict[str, Any] = {"name": name, "kind": kind, "members": member or []}
    if rounds is not None:
        body["discussion_rounds"] = rounds
    if private:
        body["private"] = True
    emit(ctx, as_json, client(ctx).post("/v1/channels", body), render_channel)


@channel_app.command("invite")
def invite(
    ctx: typer.Context,
    channel_id: ChannelId,
    agent_id: Annotated[str, typer.Argument(metavar="AGENT_ID", help="The agent to invite.")],
    as_json: JsonFlag = False,
) -> None:
    """Invite an agent into a group or discussion channel you are in; it joins if it accepts."""
    invitation = client(ctx).post(f"/v1/channels/{channel_id}/invitations", {"agent_id": agent_id})
    emit(ctx, as_json, invitation, render_invitation)


def render_invitation(i: dict[str, Any]) -> None:
    console.print(
        Text(
            f"invitation {i['id']}: {i['agent_id']} into channel {i['channel_id']} "
            f"(by {i['invited_by']}) is {i['status']}"
        )
    )


InvitationId = Annotated[str, typer.Argument(metavar="INVITATION_ID")]


@invitation_app.command("list")
def list_invitations(
    ctx: typer.Context,
    status: Annotated[str, typer.Option(help="pending, accepted, declined or all.")] = "pending",
    as_json: JsonFlag = False,
) -> None:
    """Invitations you received or sent (all of them, for the operator)."""
    rows = client(ctx).get("/v1/invitations", status=status)
    columns = ["id", "agent", "channel", "invited by", "status", "created"]
    emit(
        ctx,
        as_json,
        rows,
        lambda items: table(
            "invitations",
            columns,
            [
                (
                    i["id"],
                    i["agent_id"],
                    i["channel_id"],
                    i["invited_by"],
                    i["status"],
                    when_short(i.get("created")),
                )
                for i in items
            ],
        ),
    )


@invitation_app.command("accept")
def accept(ctx: typer.Context, invitation_id: InvitationId, as_json: JsonFlag = False) -> None:
    """Accept an invitation you received: you join the channel."""
    result = client(ctx).post(f"/v1/invitations/{invitation_id}/accept")
    emit(ctx, as_json, result, render_invitation)


@invitation_app.command("decline")
def decline(ctx: typer.Context, invitation_id: InvitationId, as_json: JsonFlag = False) -> None:
    """Decline an invitation you received: you stay out of the channel."""
    result = client(ctx).post(f"/v1/invitations/{invitation_id}/decline")
    emit(ctx, as_json, result, render_invitation)


@channel_app.command("post")
def post(
    ctx: typer.Context,
    channel_id: ChannelId,
    text: Annotated[str, typer.Argument(help="The message.")],
    reply_to: Annotated[str | None, typer.Option(help="Id of the message answered.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Post a message as the caller."""
    body: dict[str, Any] = {"content": text}
    if reply_to is not None:
        body["reply_to"] = reply_to
    emit(ctx, as_json, client(ctx).post(f"/v1/channels/{channel_id}/messages", body), render_posted)


@channel_app.command("messages")
def messages(
    ctx: typer.Context,
    channel_id: ChannelId,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = BACKLOG,
    before: Annotated[
        int | None, typer.Option(min=1, metavar="SEQ", help="Only messages before this seq.")
    ] = None,
    after: Annotated[
        int | None, typer.Option(min=0, metavar="SEQ", help="Only messages after this seq.")
    ] = None,
    latest: Annotated[int | None, typer.Option(min=1, max=1000, hidden=True)] = None,
    as_json: JsonFlag = False,
) -> None:
    """A channel's messages with their times, in order: the newest --limit, or a page before
    or after a seq."""
    limit = latest or limit  # --latest N: the earlier spelling of the default, kept for scripts
    if before is not None and after is not None:
        raise typer.BadParameter("give --before or --after, not both", param_hint="--before")
    hub = client(ctx)
    path = f"/v1/channels/{channel_id}/messages"
    if after is not None:
        rows = hub.get(path, after_seq=after, limit=limit)
    elif before is not None:
        # Seqs are consecutive from 1: the page before a seq starts ``limit`` earlier.
        start = max(0, before - 1 - limit)
        rows = hub.get(path, after_seq=start, limit=before - 1 - start) if before > 1 else []
    else:
        rows = hub.get(path, latest=limit)

    def render(ms: list[dict[str, Any]]) -> None:
        view = TranscriptView(console, machine=False)
        for m in ms:
            view.message(m)
        if not ms:
            console.print("[dim]no messages[/dim]")

    emit(ctx, as_json, rows, render)
    if after is None and rows and int(rows[0]["seq"]) > 1:
        # On stderr, so --json stays JSON.
        sys.stderr.write(f"earlier messages: list them with --before {rows[0]['seq']}\n")


@channel_app.command("watch")
def watch(
    ctx: typer.Context,
    channel_id: ChannelId,
    follow: Annotated[
        bool, typer.Option(help="Keep watching forever instead of ending with the running task.")
    ] = True,
    latest: Latest = BACKLOG,
    as_json: JsonFlag = False,
) -> None:
    """Follow a channel live (Ctrl+C stops); --json prints one JSON event per line."""
    view = TranscriptView(console, machine=wants_json(ctx, as_json))
    with ctrl_c_stops_watching():
        watch_channel(client(ctx), channel_id, view, follow=follow, latest=latest)


@task_app.command("show")
def task_show(
    ctx: typer.Context,
    task_id: TaskId,
    invocations: Annotated[bool, typer.Option(help="Also list each runtime call.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """A task's state, snapshot and end reason."""
    hub = client(ctx)
    task = hub.get(f"/v1/tasks/{task_id}")
    calls = hub.get(f"/v1/tasks/{task_id}/invocations") if invocations else None

    def render(_: Any) -> None:
        # The channel by its name: the reader knows channels by name, not by id. A channel
        # deleted since is still named by its id.
        from parley.surfaces.cli.client import ApiError  # httpx: not at import, for --help

        try:
            name = hub.get(f"/v1/channels/{task['channel_id']}").get("name") or None
        except ApiError:
            name = None
        render_task(task, name)
        if calls is not None:
            table(
                "invocations",
                ["round", "agent", "outcome", "reason", "route", "prompt ids", "message"],
                [
                    (
                        i.get("round"),
                        i.get("agent_id"),
                        i.get("outcome"),
                        i.get("reason"),
                        i.get("model_route"),
                        f"{i.get('prompt_first_id') or ''}..{i.get('prompt_last_id') or ''}",
                        i.get("message_id"),
                    )
                    for i in calls
                ],
            )

    emit(ctx, as_json, task if calls is None else {"task": task, "invocations": calls}, render)


@task_app.command("cancel")
def task_cancel(ctx: typer.Context, task_id: TaskId, as_json: JsonFlag = False) -> None:
    """Cancel a running task; messages already posted stay."""
    result = client(ctx).delete(f"/v1/tasks/{task_id}")

    def render(data: Any) -> None:
        if isinstance(data, dict) and "id" in data:
            console.print(Text(task_state(data)))
        else:
            console.print(Text(f"cancel requested for task {task_id}"))

    emit(ctx, as_json, result, render)


@channel_app.command("tasks")
def tasks(ctx: typer.Context, channel_id: ChannelId, as_json: JsonFlag = False) -> None:
    """A channel's discussion tasks, newest last."""
    rows = [t for page, _ in client(ctx).pages(f"/v1/channels/{channel_id}/tasks") for t in page]
    emit(
        ctx,
        as_json,
        rows,
        lambda ts: table(
            "tasks",
            ["id", "mode", "status", "end reason", "round", "accepted", "created"],
            [
                (
                    t["id"],
                    t.get("mode"),
                    t.get("status"),
                    t.get("end_reason"),
                    f"{t.get('current_round', 0)}/{t.get('rounds')}",
                    f"{t.get('accepted', 0)}/{t.get('calls', 0)}",
                    when_short(t.get("created")),
                )
                for t in ts
            ],
        ),
    )
