"""``parley usage``: tokens and cost by agent, day, model, worker tree, discussion, meeting or
channel, and the budgets that cap them; ``parley search``: find mail and channel messages."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from parley.surfaces.cli.client import HubClient
from parley.surfaces.cli.output import JsonFlag, client, emit, table, when_short

usage_app = typer.Typer(
    help="Tokens and cost the agents' turns used, and budgets.", no_args_is_help=False
)
budget_app = typer.Typer(help="Budgets: what an agent or a worker tree may spend.")
usage_app.add_typer(budget_app, name="budget")

GROUPS = ("agent", "day", "model", "tree", "discussion", "meeting", "channel")
TOTAL_COLUMNS = ["turns", "input", "output", "cache read", "cache write", "tokens", "cost $"]


def total_row(key: Any, t: dict[str, Any]) -> tuple[Any, ...]:
    return (
        key,
        t["turns"],
        t["input_tokens"],
        t["output_tokens"],
        t["cache_read_tokens"],
        t["cache_write_tokens"],
        t["tokens_total"],
        f"{t['cost_usd']:.4f}",
    )


@usage_app.callback(invoke_without_command=True)
def usage(
    ctx: typer.Context,
    by: Annotated[str, typer.Option(help=f"Group by one of: {', '.join(GROUPS)}.")] = "agent",
    agent: Annotated[str | None, typer.Option(help="Only this agent's turns.")] = None,
    model: Annotated[str | None, typer.Option(help="Only turns of this model.")] = None,
    discussion: Annotated[
        str | None, typer.Option(help="Only this discussion (its name, id or id prefix).")
    ] = None,
    meeting: Annotated[
        str | None, typer.Option(help="Only this meeting (its id or the start of it).")
    ] = None,
    worker: Annotated[
        str | None,
        typer.Option(help="Only the tree of this worker (any worker of it; an id or its start)."),
    ] = None,
    since: Annotated[str | None, typer.Option(help="From this time (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option(help="Before this time (ISO 8601).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Totals of tokens and cost, grouped (the operator sees every agent; an agent its own)."""
    if ctx.invoked_subcommand is not None:
        return
    if by not in GROUPS:
        raise typer.BadParameter(f"choose one of {', '.join(GROUPS)}", param_hint="--by")
    hub = client(ctx)
    report = hub.get(
        "/v1/usage",
        by=by,
        agent=agent,
        model=model,
        discussion=hub.channel_id(discussion),
        meeting=hub.meeting_id(meeting),
        worker=hub.worker_id(worker),
        since=since,
        until=until,
    )

    def render(r: dict[str, Any]) -> None:
        rows = [total_row(g["key"], g) for g in r["groups"]]
        rows.append(total_row("(all)", r["total"]))
        table(f"usage by {by}", [by, *TOTAL_COLUMNS], rows)

    emit(ctx, as_json, report, render)


@budget_app.command("list")
def budget_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Budgets and what is spent of each."""
    rows = client(ctx).get("/v1/usage/budgets")

    def render(items: list[dict[str, Any]]) -> None:
        table(
            "budgets",
            ["scope", "key", "max tokens", "max $", "tokens used", "$ spent", "state"],
            [
                (
                    b["budget"]["scope"],
                    b["budget"]["key"],
                    b["budget"]["max_tokens"] or "-",
                    b["budget"]["max_cost_usd"] or "-",
                    b["spent"]["tokens_total"],
                    f"{b['spent']['cost_usd']:.4f}",
                    "exhausted" if b["exhausted"] else "ok",
                )
                for b in items
            ],
        )

    emit(ctx, as_json, rows, render)


def _scope(hub: HubClient, agent: str | None, worker: str | None) -> tuple[str, str]:
    if (agent is None) == (worker is None):
        raise typer.BadParameter("name either --agent or --worker", param_hint="--agent")
    return ("agent", agent) if agent is not None else ("tree", hub.worker_id(worker) or "")


@budget_app.command("set")
def budget_set(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option(help="Cap this agent's turns.")] = None,
    worker: Annotated[
        str | None, typer.Option(help="Cap the tree of this worker (any worker of it).")
    ] = None,
    tokens: Annotated[int | None, typer.Option(min=1, help="Most tokens (in + out).")] = None,
    usd: Annotated[float | None, typer.Option(help="Most US dollars stated.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Set or replace a budget (operator); a spent one refuses turns with budget_exhausted."""
    hub = client(ctx)
    scope, key = _scope(hub, agent, worker)
    body = {"scope": scope, "key": key, "max_tokens": tokens, "max_cost_usd": usd}
    budget = hub.put("/v1/usage/budgets", body)
    emit(ctx, as_json, budget, lambda b: typer.echo(f"budget {b['id']} set"))


@budget_app.command("clear")
def budget_clear(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option(help="The agent's budget.")] = None,
    worker: Annotated[str | None, typer.Option(help="The tree's budget (any worker).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Remove a budget (operator)."""
    hub = client(ctx)
    scope, key = _scope(hub, agent, worker)
    done = hub.delete(f"/v1/usage/budgets/{scope}/{key}")
    emit(ctx, as_json, done, lambda d: typer.echo("removed" if d["removed"] else "no budget"))


def search(
    ctx: typer.Context,
    words: Annotated[
        list[str] | None,
        typer.Argument(help="Words that must all occur (prefixes match).", show_default=False),
    ] = None,
    source: Annotated[str | None, typer.Option(help="mail or channel.")] = None,
    sender: Annotated[str | None, typer.Option(help="Only from this sender.")] = None,
    kind: Annotated[str | None, typer.Option(help="A mail kind or a channel kind.")] = None,
    channel: Annotated[
        str | None, typer.Option(help="Only in this channel (its name, id or id prefix).")
    ] = None,
    since: Annotated[str | None, typer.Option(help="From this time (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option(help="Before this time (ISO 8601).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many hits.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Find mail and channel messages you may read, newest first."""
    hub = client(ctx)
    hits = hub.get(
        "/v1/search",
        q=" ".join(words or []),
        source=source,
        sender=sender,
        kind=kind,
        channel=hub.channel_id(channel),
        since=since,
        until=until,
        limit=limit,
    )

    def where_found(hit: dict[str, Any]) -> str:
        """A channel hit's channel by its name (a hit's subject is its channel's name), else
        its id; a mail hit's recipient."""
        if hit["source"] == "channel":
            return f"#{hit['subject']}" if hit.get("subject") else str(hit["channel_id"])
        return f"mail→{hit['recipient_id']}"

    def render(rows: list[dict[str, Any]]) -> None:
        table(
            "search",
            ["when", "where", "kind", "from", "id", "text"],
            [
                (
                    when_short(h["created"]),
                    where_found(h),
                    h["kind"],
                    h["sender_id"],
                    h["id"],
                    (f"{h['subject']}: " if h["source"] == "mail" and h["subject"] else "")
                    + h["snippet"],
                )
                for h in rows
            ],
        )

    emit(ctx, as_json, hits, render)
