"""``parley discord check`` on a machine that cannot reach Discord says so in one line (it
printed the HTTP library's traceback, some 260 lines at 80 columns)."""

from __future__ import annotations

import socket

import discord.http
import pytest
from typer.testing import CliRunner

from parley.surfaces.cli.app import app


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_discord_check_without_a_connection_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The real discord.py client, sent to a port where nothing listens.
    monkeypatch.setattr(discord.http.Route, "BASE", f"http://127.0.0.1:{closed_port()}/api/v10")
    for name, value in (("TOKEN", "x"), ("GUILD_ID", "1"), ("FORUM_CHANNEL_ID", "2")):
        monkeypatch.setenv(f"PARLEY_DISCORD_{name}", value)
    result = CliRunner().invoke(app, ["discord", "check"], env={"COLUMNS": "80"})
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error [discord_unavailable]: could not reach Discord")
    assert "Traceback" not in result.output and len(result.output.splitlines()) <= 3
