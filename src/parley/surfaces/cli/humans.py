"""``parley human …``: create, list and show the people who use the hub."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.panel import Panel

from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    emit,
    fields,
    table,
    when,
    when_short,
)

human_app = typer.Typer(help="Create and list humans.", no_args_is_help=True)


def render_human(human: dict[str, Any]) -> None:
    fields(
        f"human {human['id']}",
        [
            ("name", human.get("display_name")),
            ("role", human.get("role")),
            ("state", human.get("state")),
            ("created", when(human.get("created"))),
        ],
    )


@human_app.command("add")
def add(
    ctx: typer.Context,
    human_id: Annotated[str, typer.Argument(metavar="ID", help="Lowercase slug, e.g. 'bob'.")],
    name: Annotated[str | None, typer.Option(help="Display name.")] = None,
    operator: Annotated[
        bool, typer.Option("--operator", help="Give the human the operator role.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Create a human (operator). Prints its token once: give it to that person."""
    body: dict[str, Any] = {"id": human_id, "operator": operator}
    if name is not None:
        body["display_name"] = name
    created = client(ctx).post("/v1/humans", body)

    def render(data: dict[str, Any]) -> None:
        render_human(data["principal"])
        console.print(
            Panel(
                f"[bold]{data['token']}[/bold]\n\n"
                "This token is shown only once. The person uses it as PARLEY_TOKEN (or --token) "
                "and to sign in to the web UI; `parley token issue` makes a new one.",
                title=f"token for {data['principal']['id']}",
                border_style="yellow",
            ),
        )

    emit(ctx, as_json, created, render)


@human_app.command("list")
def list_humans(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """All humans, the operator included."""
    humans = client(ctx).get("/v1/humans")

    def render(rows: list[dict[str, Any]]) -> None:
        table(
            "humans",
            ["id", "name", "role", "created"],
            [
                (h["id"], h.get("display_name"), h.get("role"), when_short(h.get("created")))
                for h in rows
            ],
        )

    emit(ctx, as_json, humans, render)


@human_app.command("show")
def show(
    ctx: typer.Context,
    human_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
) -> None:
    """One human."""
    emit(ctx, as_json, client(ctx).get(f"/v1/humans/{human_id}"), render_human)
