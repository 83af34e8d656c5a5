"""``parley discord …``: link a Discord user to a hub human, list and end links, and check the
bridge's setup.

``link`` asks the running hub for a one-time code, ``links`` and ``unlink`` show and end links;
``check`` reads the Discord settings of this
machine (``PARLEY_DISCORD_*``) and asks Discord's API what the bot may do, explaining what is
missing. discord.py is imported by ``check`` only.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    emit,
    print_error,
    table,
    wants_json,
)

discord_app = typer.Typer(
    help="The Discord bridge: link Discord users to hub humans, end links, check the bot's setup.",
    no_args_is_help=True,
)


def render_code(data: dict[str, Any]) -> None:
    minutes = int(float(data["expires_in_s"]) // 60)
    console.print(
        Text(
            f"Run /link {data['code']} in Discord within {minutes} minutes to act there as "
            f"{data['principal_id']!r}. The code works once, and not after the human's token "
            "is rotated.",
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


def render_links(rows: list[dict[str, Any]], title: str = "links") -> None:
    table(
        title,
        ["discord user", "human", "since"],
        ([r["user_id"], r["principal_id"], r["created"]] for r in rows),
    )


@discord_app.command("links")
def links(
    ctx: typer.Context,
    human: Annotated[
        str | None,
        typer.Option(
            help="Whose links (the operator may name any); yours, or all for the operator."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The Discord users linked to you (the operator: to anyone)."""
    params = {"principal_id": human} if human else {}
    emit(ctx, as_json, client(ctx).get("/v1/discord/links", **params), render_links)


@discord_app.command("unlink")
def unlink(
    ctx: typer.Context,
    human: Annotated[
        str | None,
        typer.Option(help="End this human's links (the operator may name any); yours if omitted."),
    ] = None,
    discord_user: Annotated[
        str | None,
        typer.Option(help="End only this Discord user's link (its id, as `links` shows it)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """End links between Discord users and a hub human: their commands and messages no longer
    reach the hub."""
    body = {"principal_id": human, "user_id": discord_user}
    done = client(ctx).post("/v1/discord/unlink", {k: v for k, v in body.items() if v})
    emit(ctx, as_json, done, lambda data: render_links(data["unlinked"], "unlinked"))


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
    from parley.bootstrap import discord_adapter
    from parley.core.errors import ConfigError

    try:
        check_discord = discord_adapter().check
    except ConfigError as exc:
        print_error(exc.code, exc.message)
        raise typer.Exit(1) from None

    assert settings.discord_token is not None
    assert settings.discord_guild_id is not None
    assert settings.discord_forum_channel_id is not None
    try:
        results = asyncio.run(
            check_discord(
                settings.discord_token.get_secret_value(),
                guild_id=settings.discord_guild_id,
                forum_channel_id=settings.discord_forum_channel_id,
            )
        )
    except (OSError, TimeoutError) as exc:
        # No connection (no network, no name resolution, a proxy in the way): one line, not
        # the HTTP library's traceback.
        print_error(
            "discord_unavailable",
            f"could not reach Discord to check the settings ({type(exc).__name__}: {exc}); "
            "check this machine's network access to discord.com",
        )
        raise typer.Exit(1) from None
    rows = [{"check": name, "ok": ok, "detail": detail} for name, ok, detail in results]
    if wants_json(ctx, as_json):
        emit(ctx, as_json, rows, lambda _: None)
    else:
        for row in rows:
            mark = Text("ok  ", style="green") if row["ok"] else Text("FAIL", style="bold red")
            console.print(Text.assemble(mark, f" {row['check']}: {row['detail']}"), soft_wrap=True)
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)
