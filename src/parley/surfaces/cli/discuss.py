"""``parley discuss …`` (discussion channels that report back) and ``parley group …``."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer
from rich.text import Text

from parley.core.names import short_ids
from parley.surfaces.cli.channels import ChannelId, Latest, Members, render_channel, render_posted
from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    ctrl_c_stops_watching,
    emit,
    fields,
    print_event,
    table,
    wants_json,
)
from parley.surfaces.cli.transcript import BACKLOG, TranscriptView, task_state, watch_channel

discuss_app = typer.Typer(
    help="Discussions: a private channel whose result goes back to whoever started it.",
    no_args_is_help=True,
)
group_app = typer.Typer(help="Group channels: round-robin discussions.", no_args_is_help=True)

Follow = Annotated[
    bool, typer.Option(help="Keep watching after the running task ends (Ctrl+C stops).")
]
DISCUSSION_FIELDS = (
    "status",
    "mode",
    "initiatorAgentId",
    "initiatorSessionId",
    "originChannelId",
    "discussGuide",
    "summaryPath",
    "createdAt",
    "completedAt",
    "closedAt",
)


def name_from(guide: str) -> str:
    """A channel name from the first words of a guide: 'discuss-api-versioning-plan'."""
    slug = re.sub(r"[^a-z0-9]+", "-", guide.lower()).strip("-")
    return ("discuss-" + slug)[:40].rstrip("-") or "discussion"


def follow_channel(
    ctx: typer.Context,
    channel_id: str,
    *,
    follow: bool,
    latest: int,
    as_json: bool,
    after: int | None = None,
    task_id: str | None = None,
) -> None:
    view = TranscriptView(console, machine=wants_json(ctx, as_json))
    with ctrl_c_stops_watching():
        finished = watch_channel(
            client(ctx),
            channel_id,
            view,
            follow=follow,
            latest=latest,
            after=after,
            task_id=task_id,
        )
    if finished is None and not follow and not view.machine:
        console.print("[dim]no discussion is running; --follow keeps watching[/dim]")


@discuss_app.command("start")
def start(
    ctx: typer.Context,
    guide: Annotated[str, typer.Option(help="What to discuss and what conclusion to reach.")],
    member: Members = None,
    origin: Annotated[
        str | None,
        typer.Option(
            help="Channel to report back to: its name, id or id prefix (default: your work "
            "channel)."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Channel name.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Open a discussion channel; its result-ready message wakes the origin channel."""
    hub = client(ctx)
    if origin is None:
        origin = hub.get("/v1/whoami").get("work_channel_id")
        if not origin:
            raise typer.BadParameter(
                "you have no work channel to report back to; name one with --origin",
                param_hint="--origin",
            )
    if not member:
        raise typer.BadParameter("name at least one --member", param_hint="--member")
    origin = hub.channel_id(origin)
    body = {
        "name": name or name_from(guide),
        "members": member,
        "callbackChannelId": origin,
        "discussGuide": guide,
    }
    emit(ctx, as_json, hub.post("/v1/channels/private", body), render_channel)


@discuss_app.command("status")
def status(ctx: typer.Context, channel_id: ChannelId, as_json: JsonFlag = False) -> None:
    """A discussion's state: initiator, origin, guide, summary, and its latest task."""
    hub = client(ctx)
    channel = hub.get(f"/v1/channels/{channel_id}")
    tasks = [t for page, _ in hub.pages(f"/v1/channels/{channel_id}/tasks") for t in page]

    def render(_: Any) -> None:
        meta = channel.get("metadata") or {}
        if meta.get("mode") != "discussion":
            console.print(
                Text(f"{channel_id} is a {channel.get('kind')} channel, not a discussion")
            )
        fields(
            f"discussion {channel_id} ({channel.get('name')})",
            [("members", channel.get("members"))] + [(k, meta.get(k)) for k in DISCUSSION_FIELDS],
        )
        if tasks:
            console.print(Text(task_state(tasks[-1])))

    emit(ctx, as_json, {"channel": channel, "tasks": tasks}, render)


@discuss_app.command("callback")
def callback(
    ctx: typer.Context,
    channel_id: ChannelId,
    summary_path: Annotated[
        str, typer.Argument(help="The summary file; relative paths are in your workspace.")
    ],
    session: Annotated[
        str | None,
        typer.Option(
            help="The session you call from (default: yours in the discussion); only the "
            "initiator's session there or in the channel it was opened from may finish it."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Finish a discussion you started with its summary file (initiator only)."""
    body: dict[str, Any] = {"summaryPath": summary_path}
    if session:
        body["session_id"] = session
    closed = client(ctx).post(f"/v1/channels/{channel_id}/callback", body)

    def render(c: dict[str, Any]) -> None:
        meta = c.get("metadata") or {}
        console.print(
            Text(
                f"discussion {c['id']} is {meta.get('status')}; the summary "
                f"{meta.get('summaryPath')} was sent to {meta.get('originChannelId')}"
            )
        )

    emit(ctx, as_json, closed, render)


@discuss_app.command("close")
def close(
    ctx: typer.Context,
    channel_id: ChannelId,
    reason: Annotated[str, typer.Option(help="Why the discussion is closed.")],
    as_json: JsonFlag = False,
) -> None:
    """Force-close a discussion without a summary (operator)."""
    closed = client(ctx).post(f"/v1/channels/{channel_id}/close", {"reason": reason})
    emit(ctx, as_json, closed, render_channel)


@discuss_app.command("watch")
def discuss_watch(
    ctx: typer.Context,
    channel_id: ChannelId,
    follow: Follow = False,
    latest: Latest = BACKLOG,
    as_json: JsonFlag = False,
) -> None:
    """Watch a discussion live until its running task ends."""
    follow_channel(ctx, channel_id, follow=follow, latest=latest, as_json=as_json)


@group_app.command("create")
def group_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(help="Group name.")],
    member: Members = None,
    rounds: Annotated[int, typer.Option(help="Rounds per discussion (1-5).", min=1, max=5)] = 3,
    as_json: JsonFlag = False,
) -> None:
    """Create a group: every human message starts (or supersedes) a round-robin discussion;
    an agent's post joins the transcript without starting one."""
    if not member:
        raise typer.BadParameter("name at least one --member", param_hint="--member")
    body = {"name": name, "kind": "group", "members": member, "discussion_rounds": rounds}
    emit(ctx, as_json, client(ctx).post("/v1/channels", body), render_channel)


@group_app.command("post")
def group_post(
    ctx: typer.Context,
    channel_id: ChannelId,
    text: Annotated[str, typer.Argument(help="The message that starts the discussion.")],
    watch: Annotated[bool, typer.Option(help="Then watch the discussion until it ends.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Post to a group; a newer message supersedes the running discussion."""
    posted = client(ctx).post(f"/v1/channels/{channel_id}/messages", {"content": text})
    if watch and wants_json(ctx, as_json):
        print_event("posted", posted)  # the stream that follows is JSON lines too
    else:
        emit(ctx, as_json, posted, render_posted)
    if watch:
        seq = int((posted.get("message") or {}).get("seq") or 0)
        follow_channel(
            ctx,
            channel_id,
            follow=False,
            latest=0,
            as_json=as_json,
            after=seq,
            task_id=posted.get("task_id"),
        )


@group_app.command("set")
def group_set(
    ctx: typer.Context,
    channel_id: ChannelId,
    member: Annotated[
        list[str] | None, typer.Option(help="The new member list (repeat); you stay in it.")
    ] = None,
    rounds: Annotated[
        int | None, typer.Option(help="Rounds per discussion (1-5).", min=1, max=5)
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Change a group's members or rounds (creator or operator); the running discussion keeps
    its snapshot, the next one uses the new settings."""
    body: dict[str, Any] = {}
    if member:
        body["members"] = member
    if rounds is not None:
        body["discussion_rounds"] = rounds
    if not body:
        raise typer.BadParameter("give --member or --rounds", param_hint="--member/--rounds")
    emit(ctx, as_json, client(ctx).patch(f"/v1/im/sessions/{channel_id}", body), render_channel)


@group_app.command("delete")
def group_delete(ctx: typer.Context, channel_id: ChannelId, as_json: JsonFlag = False) -> None:
    """Delete a group (creator or operator): its running discussion ends, its messages are
    kept for the record."""
    emit(ctx, as_json, client(ctx).delete(f"/v1/im/sessions/{channel_id}"), render_channel)


@group_app.command("watch")
def group_watch(
    ctx: typer.Context,
    channel_id: ChannelId,
    follow: Follow = False,
    latest: Latest = BACKLOG,
    as_json: JsonFlag = False,
) -> None:
    """Live transcript with speakers, rounds and task state; ends with the running task."""
    follow_channel(ctx, channel_id, follow=follow, latest=latest, as_json=as_json)


@group_app.command("list")
def group_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Group channels you are a member of or created (all, for the operator)."""
    groups = [c for page, _ in client(ctx).pages("/v1/im/sessions") for c in page]
    emit(
        ctx,
        as_json,
        groups,
        lambda gs: table(
            "groups",
            ["id", "name", "members", "rounds", "messages"],
            [
                (
                    short_ids(x["id"] for x in gs)[g["id"]],
                    g.get("name"),
                    ", ".join(g.get("members") or []),
                    g.get("discussion_rounds"),
                    g.get("last_seq"),
                )
                for g in gs
            ],
        ),
    )
