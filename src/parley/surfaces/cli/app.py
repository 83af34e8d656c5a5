"""The ``parley`` command: global options, the command tree, and how failures are reported.

A refusal from the hub prints ``error [code]: message`` on stderr and exits 1; a usage error
exits 2 (click's convention); ``--json`` prints the API's raw JSON for scripts.
"""

from __future__ import annotations

import copy
import inspect
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
    status,
    tokens,
    usage,
    workers,
)
from parley.surfaces.cli.client import CliFailure
from parley.surfaces.cli.output import State, print_error, state

# Commands that do not print an answer of the hub: ``--json`` means nothing to them.
NO_JSON = frozenset({"serve", "demo", "mcp"})
# How a value is shown in help, by the type typer reports: a word, never a Python type.
VALUE_NAMES = {"int": "N", "float": "SECONDS", "path": "PATH", "datetime": "TIME"}


def json_option(template: Any) -> Any:
    """``--json`` for a command that had none: a copy of the global flag (``template``) that
    turns it on, listed where it also works."""

    def turn_on(ctx: Any, _param: Any, value: bool) -> None:
        if value:
            state(ctx).json = True

    option = copy.copy(template)
    option.expose_value = False
    option.callback = turn_on
    option.help = "Print the raw JSON returned by the API (for scripts)."
    return option


def tidy_help(command: Any, name: str, json_flag: Any) -> None:
    """Help that reads the same on every command: a flag shows no value, an option's value and
    an argument are named in capitals (never a Python type), and ``--json`` is listed wherever
    it works. (Typer vendors click: its objects are recognised by what they have.)"""
    quiet_help_flag(command)
    command.help = unwrapped(command.help)
    subcommands = getattr(command, "commands", None)
    if subcommands is not None:
        for sub_name, sub in subcommands.items():
            tidy_help(sub, sub_name, json_flag)
        return
    name_values(command.params)
    for param in command.params:
        if param.param_type_name == "argument":
            # A bare ID says less than the name it stands for: AGENT_ID, like CHANNEL_ID.
            if param.metavar is None or (param.metavar == "ID" and param.name):
                param.metavar = (param.name or "value").upper()
            if not param.help and (param.name or "").endswith("_id"):
                noun = param.name.removesuffix("_id").replace("_", " ")
                param.help = f"The {noun}'s id."
            # The argument's name says what it is; no Python type beside it.
            param.display_type_rich = no_type
    has_json = any("--json" in p.opts for p in command.params)
    if not has_json and name not in NO_JSON:
        command.params.append(json_option(json_flag))


def unwrapped(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line: help shows its line breaks as they are, so a
    paragraph wrapped in the source came out broken mid-sentence in the list of commands."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def name_values(params: Any) -> None:
    """Options: a flag shows no value, any other option a word in capitals."""
    for param in params:
        if param.param_type_name != "option":
            continue
        if param.is_flag or param.count:
            param.metavar = ""
        elif param.metavar is None:
            param.metavar = value_name(param)


def quiet_help_flag(command: Any) -> None:
    """``--help`` is a flag too: no value shown (click makes it per context)."""
    make = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = make(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option


def no_type(ctx: Any) -> None:
    return None


def value_name(param: Any) -> str:
    if param.multiple and param.name:
        return str(param.name).upper()
    bare = str(param.bare_type()).lower()
    return VALUE_NAMES.get(bare, "TEXT")


class ParleyGroup(TyperGroup):
    """The root group: turns every ``CliFailure`` raised below it into one line and exit 1, and
    tidies every command's help once the tree is built."""

    tidied = False

    def tidy(self) -> ParleyGroup:
        """Tidy the help of the whole tree, once."""
        if not self.tidied:
            json_flag = next(p for p in self.params if "--json" in p.opts)
            tidy_help(self, self.name or "parley", json_flag)
            name_values(self.params)
            self.tidied = True
        return self

    def main(self, *args: Any, **kwargs: Any) -> Any:
        return self.tidy().super_main(*args, **kwargs)

    def super_main(self, *args: Any, **kwargs: Any) -> Any:
        return super().main(*args, **kwargs)

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
    add_completion=True,
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
app.command("status")(status.status)
app.command("ui")(status.ui)
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
app.add_typer(usage.usage_app, name="usage")
app.command("search")(usage.search)


def main() -> None:
    """Console-script entry point."""
    app()
