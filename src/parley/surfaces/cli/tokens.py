"""``parley token …``: issue labelled tokens, list a principal's tokens, revoke one."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.panel import Panel
from rich.text import Text

from parley.surfaces.cli.output import JsonFlag, client, console, emit, table, when_short

token_app = typer.Typer(help="Issue, list and revoke bearer tokens.", no_args_is_help=True)

Principal = Annotated[str, typer.Argument(metavar="PRINCIPAL", help="Agent or human id.")]


@token_app.command("issue")
def issue(
    ctx: typer.Context,
    principal: Principal,
    label: Annotated[
        str,
        typer.Option(help="What the token is for (a client, a machine), shown by 'token list'."),
    ] = "issued",
    rotate: Annotated[
        bool, typer.Option(help="Revoke every previous token of the principal.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Issue a new token for an agent or human (operator). Shown once."""
    issued = client(ctx).post(
        f"/v1/principals/{principal}/tokens", {"rotate": rotate, "label": label}
    )

    def render(data: dict[str, Any]) -> None:
        note = "Previous tokens are revoked." if rotate else "Previous tokens stay valid."
        console.print(
            Panel(
                f"[bold]{data['token']}[/bold]\n\nShown only once. {note} Revoke this one alone "
                f"with 'parley token revoke {data['principal_id']} {data['id']}'.",
                title=f"token {data['id']} ({data['label']}) for {data['principal_id']}",
                border_style="yellow",
            ),
        )

    emit(ctx, as_json, issued, render)


@token_app.command("list")
def list_tokens(ctx: typer.Context, principal: Principal, as_json: JsonFlag = False) -> None:
    """A principal's valid tokens: id, label, issued, last used (never the secret)."""
    tokens = client(ctx).get(f"/v1/principals/{principal}/tokens")

    def render(rows: list[dict[str, Any]]) -> None:
        table(
            f"tokens of {principal}",
            ["id", "label", "issued", "last used"],
            [
                (
                    t["id"],
                    t["label"],
                    when_short(t.get("created")),
                    when_short(t.get("last_used")) if t.get("last_used") else "never",
                )
                for t in rows
            ],
        )

    emit(ctx, as_json, tokens, render)


@token_app.command("revoke")
def revoke(
    ctx: typer.Context,
    principal: Principal,
    token_id: Annotated[
        str, typer.Argument(metavar="TOKEN_ID", help="The token's id from 'token list'.")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Revoke one token of a principal (operator); its other tokens stay valid."""
    revoked = client(ctx).request("DELETE", f"/v1/principals/{principal}/tokens/{token_id}")

    def render(data: dict[str, Any]) -> None:
        console.print(Text(f"revoked token {data['id']} ({data['label']}) of {principal}"))

    emit(ctx, as_json, revoked, render)
