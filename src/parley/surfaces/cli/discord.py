"""``parley discord …``: link a Discord user to a hub human, and check the bridge's setup.

``link`` asks the running hub for a one-time code; ``check`` reads the Discord settings of this
machine (``PARLEY_DISCORD_*``) and asks Discord's API what the bot may do, explaining what is
missing. discord.py is imported by ``check`` only.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from parley.surfaces.cli.output import JsonFlag, client, console, emit, print_error, wants_json

discord_app = typer.Typer(
    help="The Discord bridge: link Discord users to hub humans, check the bot's setup.",
    no_args_is_help=True,
)


def render_code(data: dict[str, Any]) -> None:
    minutes = int(float(data["expires_in_s"]) // 60)
    console.print(
        Text(
            f"Run /link {data['code']} in Discord within {minutes} minutes to act there as "
            f"{data['principal_id']!r}. The code works once.",
        ),
        soft_wrap=True,
    )


@discord_app.command("link")
def link(
    ctx: typer.Context,
    human: Annotated[
        str | None,
        typer.Option(help="The human to link (the operator may name any); yourself if omitted."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """A one-time code that links the Discord user who runs /link with it to a hub human."""
    body = {"principal_id": human} if human else {}
    emit(ctx, as_json, client(ctx).post("/v1/discord/link-codes", body), render_code)


@discord_app.command("check")
def check(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Validate the Discord settings and what the bot may do, and say what is missing."""
    import asyncio

    from parley.config import Settings

    settings = Settings()
    missing = settings.discord_missing
    if missing:
        print_error(
            "discord_not_configured",
            f"set {', '.join(missing)} (see docs/discord.md)",
        )
        raise typer.Exit(1)
    from parley.adapters.bridges.discord import check as check_discord

    assert settings.discord_token is not None
    assert settings.discord_guild_id is not None
    assert settings.discord_forum_channel_id is not None
    results = asyncio.run(
        check_discord(
            settings.discord_token.get_secret_value(),
            guild_id=settings.discord_guild_id,
            forum_channel_id=settings.discord_forum_channel_id,
        )
    )
    rows = [{"check": name, "ok": ok, "detail": detail} for name, ok, detail in results]
    if wants_json(ctx, as_json):
        emit(ctx, as_json, rows, lambda _: None)
    else:
        for row in rows:
            mark = Text("ok  ", style="green") if row["ok"] else Text("FAIL", style="bold red")
            console.print(Text.assemble(mark, f" {row['check']}: {row['detail']}"), soft_wrap=True)
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)
