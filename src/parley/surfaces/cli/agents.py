"""``parley agent …`` (``agent connect`` included) and ``parley whoami``."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.panel import Panel
from rich.text import Text

from parley.core.runtime import RUNTIME_KINDS
from parley.surfaces.cli import connect as connection
from parley.surfaces.cli.client import CliFailure, HubClient
from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    emit,
    fields,
    json_object,
    print_json,
    state,
    table,
    wants_json,
    when,
    when_short,
)

agent_app = typer.Typer(help="Create and inspect agents.", no_args_is_help=True)

AcceptFrom = Annotated[
    list[str] | None,
    typer.Option(
        "--accept-channels-from",
        help="Who may add the agent to channels without an invitation: an id, or '*' for "
        "anyone (repeatable). Default: nobody.",
    ),
]


def runtime_config(kind: str | None, raw: str | None) -> dict[str, Any] | None:
    """The runtime block of an agent from ``--runtime`` and ``--runtime-json``."""
    runtime = json_object(raw, "--runtime-json") if raw else {}
    if kind is not None:
        if kind not in RUNTIME_KINDS:
            raise typer.BadParameter(
                f"{kind!r} is not one of {', '.join(RUNTIME_KINDS)}", param_hint="--runtime"
            )
        runtime["kind"] = kind
    return runtime or None


def render_agent(agent: dict[str, Any]) -> None:
    runtime = agent.get("runtime") or {}
    fields(
        f"{agent.get('kind', 'agent')} {agent['id']}",
        [
            ("name", agent.get("display_name")),
            ("role", agent.get("role")),
            ("runtime", runtime.get("kind", "none")),
            ("runtime config", {k: v for k, v in runtime.items() if k != "kind"}),
            ("workspace", agent.get("workspace")),
            ("work channel", agent.get("work_channel_id")),
            ("state", agent.get("state")),
            ("created", when(agent.get("created"))),
            ("persona", agent.get("persona")),
        ],
    )


@agent_app.command("add")
def add(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="ID", help="Lowercase slug, e.g. 'alice'.")],
    name: Annotated[str | None, typer.Option(help="Display name.")] = None,
    workspace: Annotated[
        Path | None, typer.Option(help="The agent's workspace directory (summary files live here).")
    ] = None,
    persona: Annotated[str | None, typer.Option(help="Persona / system prompt.")] = None,
    runtime: Annotated[
        str | None,
        typer.Option(help=f"Runtime kind: {', '.join(RUNTIME_KINDS)}."),
    ] = None,
    runtime_json: Annotated[
        str | None,
        typer.Option("--runtime-json", help='Runtime settings as JSON, e.g. \'{"model": "x"}\'.'),
    ] = None,
    accept_channels_from: AcceptFrom = None,
    as_json: JsonFlag = False,
) -> None:
    """Create an agent (operator). Prints its token once: store it now."""
    body: dict[str, Any] = {"id": agent_id}
    if name is not None:
        body["display_name"] = name
    if workspace is not None:
        body["workspace"] = str(workspace.expanduser().resolve())
    if persona is not None:
        body["persona"] = persona
    runtime_block = runtime_config(runtime, runtime_json)
    if runtime_block is not None:
        body["runtime"] = runtime_block
    if accept_channels_from:
        body["accepts_channels_from"] = accept_channels_from
    created = client(ctx).post("/v1/agents", body)

    def render(data: dict[str, Any]) -> None:
        render_agent(data["principal"])
        console.print(
            Panel(
                f"[bold]{data['token']}[/bold]\n\n"
                "This token is shown only once. Give it to the agent (PARLEY_TOKEN or the MCP "
                "configuration); `parley token issue` makes a new one.",
                title=f"token for {data['principal']['id']}",
                border_style="yellow",
            ),
        )

    emit(ctx, as_json, created, render)


@agent_app.command("list")
def list_agents(
    ctx: typer.Context,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived agents.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """All agents (archived ones only with --archived)."""
    agents = client(ctx).get("/v1/agents", **({"archived": "true"} if archived else {}))

    def render(rows: list[dict[str, Any]]) -> None:
        table(
            "agents",
            ["id", "name", "runtime", "workspace", "state", "created"],
            [
                (
                    a["id"],
                    a.get("display_name"),
                    (a.get("runtime") or {}).get("kind", "none"),
                    a.get("workspace") or "",
                    a.get("state", ""),
                    when_short(a.get("created")),
                )
                for a in rows
            ],
        )

    emit(ctx, as_json, agents, render)


@agent_app.command("show")
def show(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
) -> None:
    """One agent (runtime secrets are redacted by the hub)."""
    emit(ctx, as_json, client(ctx).get(f"/v1/agents/{agent_id}"), render_agent)


@agent_app.command("consent")
def consent(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="ID")],
    accept_channels_from: AcceptFrom = None,
    nobody: Annotated[
        bool, typer.Option("--nobody", help="Accept channels from nobody: others must invite.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show or set whom an agent lets add it to channels (the agent itself or the operator)."""
    path = f"/v1/agents/{agent_id}/consent"
    if nobody and accept_channels_from:
        raise typer.BadParameter("give --accept-channels-from or --nobody, not both")
    hub = client(ctx)
    if nobody or accept_channels_from:
        body = {"accepts_channels_from": accept_channels_from or []}
        data = hub.request("PUT", path, json_body=body)
    else:
        data = hub.get(path)

    def render(view: dict[str, Any]) -> None:
        allowed = view.get("accepts_channels_from") or []
        console.print(
            Text(
                f"{view['agent_id']} accepts channels from "
                + (", ".join(allowed) if allowed else "nobody (others must invite it)")
            )
        )

    emit(ctx, as_json, data, render)


def whoami(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Who the configured token belongs to, and which hub answered."""
    me = client(ctx).get("/v1/whoami")

    def render(data: dict[str, Any]) -> None:
        cfg = state(ctx).config()
        render_agent(data)
        console.print(Text(f"hub {cfg.url} (from {cfg.url_source})", style="dim"))
        console.print(Text(f"token from {cfg.token_source}", style="dim"))

    emit(ctx, as_json, me, render)


@agent_app.command("connect")
def connect(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="ID", help="The agent to connect.")],
    client_kind: Annotated[
        str, typer.Option("--client", help=f"MCP client: {', '.join(connection.CLIENTS)}.")
    ] = "generic",
    url: Annotated[
        str | None,
        typer.Option("--url", help="Hub URL the agent uses (default: the hub this CLI talks to)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Reuse this token of the agent (default: issue a new one labelled "
            "'connect:<client>', as the operator).",
        ),
    ] = None,
    profile: Annotated[
        str, typer.Option(help=f"Tool set: {', '.join(connection.PROFILES)}.")
    ] = "default",
    as_json: JsonFlag = False,
) -> None:
    """Print the exact MCP configuration for an agent's client: the hub URL and its token.

    Without --token every run issues a new token for the agent, labelled 'connect:<client>'
    (its earlier tokens stay valid; 'parley token list' shows them, 'parley token revoke' ends
    one); with --token that token is checked against the hub and reused as it is."""
    if client_kind not in connection.CLIENTS:
        raise typer.BadParameter(
            f"{client_kind!r} is not one of {', '.join(connection.CLIENTS)}", param_hint="--client"
        )
    if profile not in connection.PROFILES:
        raise typer.BadParameter(
            f"{profile!r} is not one of {', '.join(connection.PROFILES)}", param_hint="--profile"
        )
    config = state(ctx).config()
    fresh = token is None
    token_id = token_label = None
    if token is None:
        # Labelled by client, so that 'parley token list' tells the tokens of each apart.
        body = {"rotate": False, "label": f"connect:{client_kind}"}
        issued = client(ctx).post(f"/v1/principals/{agent_id}/tokens", body)
        token = str(issued["token"])
        token_id, token_label = str(issued["id"]), str(issued["label"])
    else:
        with HubClient(dataclasses.replace(config, token=token, token_source="--token")) as hub:
            owner = hub.get("/v1/whoami")["id"]
        if owner != agent_id:
            raise CliFailure(
                f"the token given with --token belongs to {owner!r}, not {agent_id!r}; pass "
                f"{agent_id!r}'s token, or leave --token out to issue one",
                code="token_mismatch",
            )
    conn = connection.Connection(
        agent_id=agent_id,
        hub_url=(url or config.url).rstrip("/"),
        token=token,
        profile=profile,
        token_issued=fresh,
        token_id=token_id,
        token_label=token_label,
    )
    if wants_json(ctx, as_json):
        print_json(connection.as_json(client_kind, conn))
    else:
        sys.stdout.write(connection.render(client_kind, conn))


@agent_app.command("update")
def update(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="ID")],
    name: Annotated[str | None, typer.Option(help="New display name.")] = None,
    workspace: Annotated[
        Path | None, typer.Option(help="New workspace directory (may not overlap another's).")
    ] = None,
    persona: Annotated[str | None, typer.Option(help="New persona / system prompt.")] = None,
    runtime: Annotated[
        str | None,
        typer.Option(help=f"New runtime kind: {', '.join(RUNTIME_KINDS)}."),
    ] = None,
    runtime_json: Annotated[
        str | None,
        typer.Option(
            "--runtime-json",
            help="New runtime settings as JSON; they replace the old ones (the kind stays "
            "unless --runtime changes it).",
        ),
    ] = None,
    accept_channels_from: AcceptFrom = None,
    as_json: JsonFlag = False,
) -> None:
    """Change an agent's name, persona, runtime, workspace or consent (operator).

    Checked as at its creation; its next turn uses the new settings. What is not given stays
    as it is."""
    hub = client(ctx)
    body: dict[str, Any] = {}
    if name is not None:
        body["display_name"] = name
    if workspace is not None:
        body["workspace"] = str(workspace.expanduser().resolve())
    if persona is not None:
        body["persona"] = persona
    runtime_block = runtime_config(runtime, runtime_json)
    if runtime_block is not None:
        if "kind" not in runtime_block:
            current = hub.get(f"/v1/agents/{agent_id}")
            runtime_block["kind"] = (current.get("runtime") or {}).get("kind", "none")
        body["runtime"] = runtime_block
    if accept_channels_from:
        body["accepts_channels_from"] = accept_channels_from
    if not body:
        raise typer.BadParameter(
            "give at least one of --name, --workspace, --persona, --runtime, --runtime-json, "
            "--accept-channels-from"
        )
    emit(ctx, as_json, hub.patch(f"/v1/agents/{agent_id}", body), render_agent)


def _lifecycle(ctx: typer.Context, agent_id: str, action: str, as_json: bool, done: str) -> None:
    changed = client(ctx).post(f"/v1/agents/{agent_id}/{action}", {})

    def render(agent: dict[str, Any]) -> None:
        console.print(Text(f"agent {agent['id']} {done}"))

    emit(ctx, as_json, changed, render)


AgentId = Annotated[str, typer.Argument(metavar="ID")]


@agent_app.command("disable")
def disable(ctx: typer.Context, agent_id: AgentId, as_json: JsonFlag = False) -> None:
    """Give an agent no turns until it is enabled (operator); its mail waits for it."""
    _lifecycle(ctx, agent_id, "disable", as_json, "is disabled: no turns; its mail waits")


@agent_app.command("enable")
def enable(ctx: typer.Context, agent_id: AgentId, as_json: JsonFlag = False) -> None:
    """Give a disabled agent turns again (operator)."""
    _lifecycle(ctx, agent_id, "enable", as_json, "is enabled")


@agent_app.command("archive")
def archive(ctx: typer.Context, agent_id: AgentId, as_json: JsonFlag = False) -> None:
    """Retire an agent for good (operator); its records are kept.

    Its tokens are revoked, it leaves its room and is listed nowhere. Its mail, transcripts and
    events are kept, and its id is never reused, so that they keep meaning this agent."""
    _lifecycle(
        ctx,
        agent_id,
        "archive",
        as_json,
        "is archived: tokens revoked, gone from lists and rooms; its records are kept",
    )
