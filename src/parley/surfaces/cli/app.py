"""The ``parley`` command: global options, the command tree, and how failures are reported.

A refusal from the hub prints ``error [code]: message`` on stderr and exits 1; a usage error
exits 2 (click's convention); ``--json`` prints the API's raw JSON for scripts.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from parley import __version__
from parley.surfaces.cli import (
    agents,
    channels,
    discord,
    discuss,
    events,
    extras,
    humans,
    mail,
    mailroom,
    rooms,
    serve,
    tokens,
    workers,
)
from parley.surfaces.cli.client import CliFailure
from parley.surfaces.cli.output import State, print_error


class ParleyGroup(TyperGroup):
    """The root group: turns every ``CliFailure`` raised below it into one line and exit 1."""

    def invoke(self, ctx: Any) -> Any:  # click.Context (vendored by newer typer)
        try:
            return super().invoke(ctx)
        except CliFailure as exc:
            print_error(exc.code, exc.message)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    name="parley",
    cls=ParleyGroup,
    help=(
        "parley: a coordination hub for AI agent sessions (mail, channels, discussions, rooms, "
        "workers)."
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"parley {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    home: Annotated[
        str | None,
        typer.Option(help="Data root (env PARLEY_HOME; default: the user data directory)."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(help="Hub URL (env PARLEY_URL; default: from <home>/hub.json)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(help="Bearer token (env PARLEY_TOKEN; default: <home>/operator.token)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the raw JSON of the API for every command.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Global options: which hub, which data root, which token."""
    ctx.obj = State(home=home, url=url, token=token, json=as_json)


app.command("serve")(serve.serve)
app.command("whoami")(agents.whoami)
app.command("events")(events.events)
app.command("demo")(extras.demo)
app.command("mcp")(extras.mcp)
app.add_typer(agents.agent_app, name="agent")
app.add_typer(humans.human_app, name="human")
app.add_typer(tokens.token_app, name="token")
app.add_typer(mail.mail_app, name="mail")
app.add_typer(mailroom.mailroom_app, name="mailroom")
app.add_typer(channels.channel_app, name="channel")
app.add_typer(channels.task_app, name="task")
app.add_typer(channels.invitation_app, name="invitation")
app.add_typer(discuss.discuss_app, name="discuss")
app.add_typer(discuss.group_app, name="group")
app.add_typer(rooms.room_app, name="room")
app.add_typer(workers.worker_app, name="worker")
app.add_typer(discord.discord_app, name="discord")


def main() -> None:
    """Console-script entry point."""
    app()
