"""``parley serve``: run the hub (store, service layer, REST API) under uvicorn."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from parley.private_files import PRIVATE_UMASK
from parley.surfaces.cli.output import print_error, state

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option(help="Interface to listen on (env PARLEY_HOST; 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(help="Port (0 picks a free one) (env PARLEY_PORT; 8765).", min=0, max=65535),
    ] = None,
    home: Annotated[
        Path | None, typer.Option(help="Data root (env PARLEY_HOME; the user data directory).")
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(help="sqlite:///<path> or postgresql://… (env PARLEY_DATABASE_URL)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help=f"One of {', '.join(LOG_LEVELS)}.")] = "warning",
    log_format: Annotated[
        str | None,
        typer.Option(help="text or json: one JSON object a line (env PARLEY_LOG_FORMAT; text)."),
    ] = None,
    discord: Annotated[
        bool,
        typer.Option(
            "--discord",
            help="Run the Discord bridge (PARLEY_DISCORD_*; it also runs whenever they are set).",
        ),
    ] = False,
) -> None:
    """Run the hub: the store, the REST API with its live streams, on one port."""
    if log_level not in LOG_LEVELS:
        raise typer.BadParameter(f"{log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    given: dict[str, Any] = {
        "host": host,
        "port": port,
        "database_url": database_url,
        "log_format": log_format,
    }
    root = home or state(ctx).home
    if root is not None:
        given["home"] = Path(root).expanduser().resolve()
    # The server stack is loaded only here, so that client commands start quickly.
    from pydantic import ValidationError

    from parley.config import Settings
    from parley.surfaces.cli.hubserver import run_hub
    from parley.surfaces.logs import configure_logging

    try:
        settings = Settings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        print_error("invalid_config", f"setting {where}: {first.get('msg')}")
        raise typer.Exit(2) from None
    configure_logging(log_level, settings.log_format)
    # Every file this process creates from here on is private to this user, including the ones
    # a library creates (SQLite's WAL and shared-memory files, log files).
    os.umask(PRIVATE_UMASK)
    import asyncio

    code = asyncio.run(run_hub(settings, log_level, discord=discord))
    if code:
        raise typer.Exit(code)
