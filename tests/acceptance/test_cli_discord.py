"""``parley serve --discord``, ``parley discord link`` and ``parley discord check`` as real
processes. None of them reaches Discord: the bridge is refused before it would connect."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.cli_support import Cli, ServedHub, served_hub, spawn_hub


@pytest.fixture
def hub(tmp_path: Path, backend: str, database_url: str) -> Iterator[ServedHub]:
    with served_hub(
        tmp_path / "home", database_url=database_url if backend == "postgres" else None
    ) as served:
        yield served


def test_serve_with_discord_but_no_settings_says_which_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TOKEN", "GUILD_ID", "FORUM_CHANNEL_ID"):
        monkeypatch.delenv(f"PARLEY_DISCORD_{name}", raising=False)
    served = spawn_hub(tmp_path / "home", extra_args=["--discord"])
    try:
        assert served.proc.wait(60) == 1
    finally:
        served.stop()
    output = served.output.until_end(30)
    assert "error [discord_not_configured]" in output
    assert "PARLEY_DISCORD_TOKEN" in output and "docs/discord.md" in output


def test_discord_link_prints_a_one_time_code_for_the_caller(hub: ServedHub) -> None:
    done = Cli(hub.home).ok("discord", "link")
    assert "Run /link " in done.stdout and "'operator'" in done.stdout
    data = Cli(hub.home).json("discord", "link")
    assert data["principal_id"] == "operator" and len(data["code"]) >= 12


def test_discord_check_without_settings_names_them(tmp_path: Path) -> None:
    done = Cli(tmp_path / "home").run("discord", "check", env={"PARLEY_DISCORD_GUILD_ID": "1"})
    assert done.returncode == 1
    assert (
        "PARLEY_DISCORD_TOKEN" in done.stderr and "PARLEY_DISCORD_FORUM_CHANNEL_ID" in done.stderr
    )
    assert "PARLEY_DISCORD_GUILD_ID" not in done.stderr


def test_discord_links_and_unlink_answer_for_the_caller(hub: ServedHub) -> None:
    cli = Cli(hub.home)
    assert cli.json("discord", "links") == []
    assert "links: none" in cli.ok("discord", "links").stdout
    assert cli.json("discord", "unlink") == {"unlinked": []}
    cli.fails("discord", "unlink", "--discord-user", "700000000000000009", code="link_not_found")
    cli.fails("discord", "unlink", "--human", "nobody", code="principal_not_found")


DISCORD_SETTINGS = {
    "PARLEY_DISCORD_TOKEN": "not-a-real-token",
    "PARLEY_DISCORD_GUILD_ID": "700000000000000001",
    "PARLEY_DISCORD_FORUM_CHANNEL_ID": "700000000000000002",
}


def without_discord_py(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import discord`` fails as it does without the extra: a
    module of that name first on the path that raises what a missing package raises."""
    shadow = tmp_path / "no-discord"
    shadow.mkdir()
    (shadow / "discord.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'discord'\", name='discord')\n"
    )
    path = os.pathsep.join(p for p in (str(shadow), os.environ.get("PYTHONPATH", "")) if p)
    return {**DISCORD_SETTINGS, "PYTHONPATH": path}


def test_serve_and_check_without_the_discord_extra_name_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = without_discord_py(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    served = spawn_hub(tmp_path / "home")
    try:
        assert served.proc.wait(60) == 1
    finally:
        served.stop()
    output = served.output.until_end(30)
    assert "error [discord_not_installed]" in output
    assert "pip install 'parley[discord]'" in output
    assert "Traceback" not in output and len(output.splitlines()) < 10, output

    checked = Cli(tmp_path / "home").run("discord", "check", env=env)
    assert checked.returncode == 1
    assert "error [discord_not_installed]" in checked.stderr
    assert "pip install 'parley[discord]'" in checked.stderr
    assert "Traceback" not in checked.stderr
