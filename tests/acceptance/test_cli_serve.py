"""``parley serve`` as a real process: announcement, operator token, hub.json, refusal of a
second hub on one SQLite data root, graceful stop, and a data root that ignores the cwd."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.cli_support import Cli, ServedHub, served_hub, spawn_hub, wait_ready


@pytest.fixture
def hub_db(backend: str, database_url: str) -> str | None:
    """On PostgreSQL the hub gets the test's fresh database; on SQLite its default file."""
    return database_url if backend == "postgres" else None


@pytest.fixture
def hub(tmp_path: Path, hub_db: str | None) -> Iterator[ServedHub]:
    with served_hub(tmp_path / "home", database_url=hub_db) as served:
        yield served


def test_serve_announces_and_writes_its_files(hub: ServedHub, backend: str) -> None:
    text = hub.output.text()
    assert f"data root       {hub.home}" in text
    if backend == "postgres":
        assert "database        PostgreSQL 127.0.0.1:5432/parley_t_" in text
    else:
        assert f"database        SQLite {hub.home / 'parley.db'}" in text
    assert f"operator token  {hub.home / 'operator.token'}\n" in text
    assert "(created on this first start; it is never shown again)" in text
    # Notes go on lines of their own: only a value (a path, a URL) may make a line long.
    notes = [line for line in text.splitlines() if line.lstrip().startswith("(")]
    assert len(notes) == 2 and all(len(line) <= 80 for line in notes)
    token_file = hub.home / "operator.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert hub.token.startswith("pt_")
    info = json.loads((hub.home / "hub.json").read_text())
    assert info["url"] == hub.url
    assert info["pid"] == hub.proc.pid


def test_cli_finds_the_hub_and_token_through_the_data_root(hub: ServedHub) -> None:
    me = Cli(hub.home).json("whoami")
    assert me["id"] == "operator"
    assert me["role"] == "operator"


def test_second_serve_on_the_same_sqlite_home_is_refused(sqlite_only: None, hub: ServedHub) -> None:
    """The single-hub rule guards SQLite data roots; PostgreSQL allows several hubs."""
    second = spawn_hub(hub.home)
    try:
        assert second.proc.wait(60) == 1
    finally:
        second.stop()
    output = second.output.until_end(30)
    assert "error [hub_already_running]: another parley hub" in output
    assert f"pid {hub.proc.pid}" in output
    assert "running at" not in output
    # The first hub is untouched by the refused start.
    assert Cli(hub.home).json("whoami")["id"] == "operator"


def test_restart_keeps_the_token_and_says_where_it_is(tmp_path: Path, hub_db: str | None) -> None:
    home = tmp_path / "home"
    with served_hub(home, database_url=hub_db) as first:
        token = first.token
        created = Cli(home).json("agent", "add", "alice")
        assert created["principal"]["id"] == "alice"
    assert first.proc.returncode == 0, "SIGTERM must stop the hub cleanly"
    with served_hub(home, database_url=hub_db) as second:
        assert second.token == token
        text = second.output.text()
        assert f"operator token  {home / 'operator.token'}" in text
        assert "first start" not in text
        # The restarted hub (on another port) is found through the rewritten hub.json.
        assert [a["id"] for a in Cli(home).json("agent", "list")] == ["alice"]


def test_data_root_does_not_follow_the_cwd(tmp_path: Path, hub_db: str | None) -> None:
    home = tmp_path / "home"
    serve_cwd = tmp_path / "serve-here"
    cli_cwd = tmp_path / "elsewhere"
    serve_cwd.mkdir()
    cli_cwd.mkdir()
    # Decoys: a hub.json and a token in the cwd must never be used.
    (cli_cwd / "hub.json").write_text(json.dumps({"url": "http://127.0.0.1:9"}))
    (cli_cwd / "operator.token").write_text("pt_decoy\n")
    with served_hub(home, database_url=hub_db, cwd=serve_cwd, home_by_env=True) as served:
        assert not any(serve_cwd.iterdir()), "the hub wrote into its cwd"
        cli = Cli(home, cwd=cli_cwd)
        by_env = cli.json("whoami", home=False, env={"PARLEY_HOME": str(home)})
        by_flag = cli.json("whoami")
        assert by_env["id"] == by_flag["id"] == "operator"
        assert served.home == home
    assert not (cli_cwd / "parley.db").exists()


def test_unreachable_hub_says_how_to_start_one(tmp_path: Path) -> None:
    home = tmp_path / "nohub"
    home.mkdir()
    (home / "hub.json").write_text(json.dumps({"url": "http://127.0.0.1:9"}))
    result = Cli(home).run("agent", "list")
    assert result.returncode == 1
    assert "error [hub_unreachable]: no parley hub answers at http://127.0.0.1:9" in result.stderr
    assert "parley serve" in result.stderr


def test_wait_ready_sees_a_hub_that_fails_to_start(tmp_path: Path) -> None:
    broken = spawn_hub(tmp_path / "home", database_url="mysql://nowhere/db")
    try:
        with pytest.raises(AssertionError, match="stream ended"):
            wait_ready(broken)
    finally:
        assert broken.stop() == 1
    assert "error [unsupported_database]" in broken.output.until_end(30)
