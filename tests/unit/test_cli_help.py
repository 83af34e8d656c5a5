"""The CLI's help reads the same everywhere: every option and argument explained, a flag shows
no value, values and arguments named in capitals (never a Python type), ``--json`` listed on
every command that prints an answer of the hub, shell completion offered, and a URL that is
not one refused as such — no hub."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer.main
from typer.testing import CliRunner

from parley.surfaces.cli.app import NO_JSON, ParleyGroup, app


def commands() -> Iterator[tuple[str, Any]]:
    root = typer.main.get_command(app)
    assert isinstance(root, ParleyGroup)
    root.tidy()  # as the command does when it starts

    def walk(command: Any, path: str) -> Iterator[tuple[str, Any]]:
        subs = getattr(command, "commands", None)
        if subs is None:
            yield path, command
            return
        for name, sub in subs.items():
            yield from walk(sub, f"{path} {name}".strip())

    yield from walk(root, "")


def help_of(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_explains_every_option_and_argument() -> None:
    missing = [
        f"{path} {p.name}"
        for path, command in commands()
        for p in command.params
        if not p.hidden and not (getattr(p, "help", None) or "").strip()
    ]
    assert missing == []


def test_help_shows_no_python_types_and_no_value_for_flags() -> None:
    paths = [path for path, _ in commands()]
    assert len(paths) > 60
    offenders = []
    for path in paths:
        text = help_of(*path.split())
        if re.search(r"<(bool|str|int|float|list\[[a-z]+\]|int range|Path)>", text):
            offenders.append(path)
        usage = text.split("Usage: ", 1)[1].splitlines()[0]
        if re.search(r"[{\[]([a-z_]+)[}\]]", usage.replace("[OPTIONS]", "")):
            offenders.append(f"{path}: {usage}")
    assert offenders == []
    assert "{AGENT_ID}" in help_of("agent", "show") and "{TO}" in help_of("mail", "send")


def test_json_is_listed_on_every_command_that_answers() -> None:
    without = [
        path
        for path, command in commands()
        if path not in NO_JSON and not any("--json" in p.opts for p in command.params)
    ]
    assert without == []
    assert "--json" in help_of("agent", "consent")


def test_shell_completion_is_offered() -> None:
    text = help_of()
    assert "--install-completion" in text and "--show-completion" in text


def test_a_url_that_is_not_one_is_refused_as_such() -> None:
    result = CliRunner().invoke(app, ["--url", "notaurl", "whoami"])
    assert result.exit_code == 2, result.output
    assert "UnsupportedProtocol" not in result.output
    assert "http://" in result.output


def test_close_and_archive_are_one_verb() -> None:
    import pytest

    from parley.core.errors import Conflict
    from parley.core.mail import check_transition

    listed = help_of("mail")
    assert " close " in listed and " archive " not in listed
    assert "archived" in help_of("mail", "close")
    assert "same as close" in help_of("mail", "archive")
    with pytest.raises(Conflict) as again:
        check_transition("closed", "closed")
    assert again.value.code == "backward_transition"
    assert "already closed, which archived it" in again.value.message


def test_the_mailroom_names_of_the_operator_are_documented() -> None:
    from pathlib import Path

    from parley.core.mailroom import BROADCAST_NAME, OPERATOR_NAME

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert f"the operator is written `{OPERATOR_NAME}`" in readme
    assert f"recipient `{BROADCAST_NAME}`" in readme
    assert f"operator is written `{OPERATOR_NAME}`" in help_of("mailroom", "export")


def test_a_commands_help_is_never_broken_mid_sentence() -> None:
    """Docstrings wrapped in the source read as one line per paragraph in help (the list of
    commands showed 'for the operator also every' on a line of its own)."""
    root = typer.main.get_command(app)
    assert isinstance(root, ParleyGroup)
    root.tidy()

    def walk(command: Any, path: str) -> Iterator[tuple[str, Any]]:
        yield path, command
        for name, sub in (getattr(command, "commands", None) or {}).items():
            yield from walk(sub, f"{path} {name}".strip())

    broken = [
        path
        for path, command in walk(root, "parley")
        if re.search(r"[^\n]\n[^\n]", command.help or "")
    ]
    assert broken == []
