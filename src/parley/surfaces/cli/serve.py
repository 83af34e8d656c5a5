"""``parley serve``: run the hub (store, service layer, REST API) under uvicorn."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from parley.config import operator_token_path
from parley.surfaces.cli.output import print_error, state

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def write_operator_token(home: Path, token: str) -> Path:
    """Store the operator token readable by this user only (0600), replacing any old file."""
    path = operator_token_path(home)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    path.chmod(0o600)
    return path


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
) -> None:
    """Run the hub: the store, the REST API with its live streams, on one port."""
    if log_level not in LOG_LEVELS:
        raise typer.BadParameter(f"{log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    given: dict[str, Any] = {"host": host, "port": port, "database_url": database_url}
    root = home or state(ctx).home
    if root is not None:
        given["home"] = Path(root).expanduser().resolve()
    # The server stack is loaded only here, so that client commands start quickly.
    from pydantic import ValidationError

    from parley.config import Settings
    from parley.surfaces.cli.hubserver import run_hub

    try:
        settings = Settings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        print_error("invalid_config", f"setting {where}: {first.get('msg')}")
        raise typer.Exit(2) from None
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    code = asyncio.run(run_hub(settings, log_level))
    if code:
        raise typer.Exit(code)
