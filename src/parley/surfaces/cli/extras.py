"""``parley demo`` and ``parley mcp``: thin wrappers over modules imported only when used."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from parley.home import resolve_home
from parley.surfaces.cli.client import resolve_url
from parley.surfaces.cli.output import print_error, state


def load(module: str, name: str, command: str) -> Any:
    """The function ``module.name``, or exit 1 when that part of parley is not there."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        print_error("not_available", f"`parley {command}` is not available yet in this version")
        raise typer.Exit(1) from None


def demo(
    ctx: typer.Context,
    exit_after: Annotated[
        bool, typer.Option("--exit-after", help="Stop the demo hub once the demo has run.")
    ] = False,
) -> None:
    """Start a hub with scripted agents and run a discussion you can watch."""
    run_demo = load("parley.demo", "run_demo", "demo")
    st = state(ctx)
    home = Path(st.home).expanduser().resolve() if st.home else None
    run_demo(home=home, url=st.url or os.environ.get("PARLEY_URL"), exit_after=exit_after)


def mcp(
    ctx: typer.Context,
    profile: Annotated[str, typer.Option(help="Which tool set to offer.")] = "default",
) -> None:
    """Serve MCP over stdio for one agent, whose token comes from --token or PARLEY_TOKEN.

    With a hub URL (--url, PARLEY_URL or the data root's hub.json) it relays to that hub;
    without one it runs the hub's services in-process on the data root."""
    run_stdio = load("parley.surfaces.mcp.stdio", "run_stdio", "mcp")
    st = state(ctx)
    home = resolve_home(st.home)
    url, source = resolve_url(st.url, home)
    # Only an explicit token: an MCP client configured without one must not silently act with
    # the operator token kept in the data root.
    token = st.token or os.environ.get("PARLEY_TOKEN")
    if source == "default":
        from parley.config import Settings

        code = run_stdio(url=None, token=token, profile=profile, settings=Settings(home=home))
    else:
        code = run_stdio(url=url, token=token, profile=profile)
    if code:
        raise typer.Exit(code)
