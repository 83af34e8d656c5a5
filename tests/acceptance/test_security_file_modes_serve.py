"""A real ``parley serve`` keeps its data root private: 0700, every file in it 0600 while it
runs (SQLite's WAL and shared-memory files included), and a data root an older parley left open
to others is restricted at start with a warning line per path."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import httpx

from tests.acceptance.cli_support import ServedHub, served_hub


def modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def private(root: Path) -> dict[str, int]:
    return {name: 0o700 if (root / name).is_dir() else 0o600 for name in modes(root)}


def some_mail(hub: ServedHub) -> None:
    headers = {"Authorization": f"Bearer {hub.token}"}
    with httpx.Client(base_url=hub.url, headers=headers, timeout=30) as client:
        r = client.post("/v1/agents", json={"id": "alice"})
        assert r.status_code == 201, r.text
        for n in range(20):
            mail = {"to": "alice", "kind": "task", "subject": f"m{n}", "body": "x" * 2000}
            assert client.post("/v1/mail", json=mail).status_code == 201


def test_a_served_data_root_and_every_file_in_it_are_private(
    tmp_path: Path, backend: str, database_url: str
) -> None:
    home = tmp_path / "home"
    pg = database_url if backend == "postgres" else None
    with served_hub(home, database_url=pg) as hub:
        some_mail(hub)
        names = set(modes(home))
        assert {"operator.token", "hub.json"} <= names
        if backend == "sqlite":
            assert {"parley.db", "parley.db-wal", "parley.db-shm", "parley.db.lock"} <= names
        assert modes(home) == private(home)
    assert modes(home) == private(home)


def test_an_open_data_root_is_restricted_at_start_with_a_log_line(
    tmp_path: Path, backend: str, database_url: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    sqlite3.connect(home / "parley.db").close()
    (home / "parley.db").chmod(0o644)
    pg = database_url if backend == "postgres" else None
    with served_hub(home, database_url=pg) as hub:
        assert modes(home) == private(home)
        out = hub.output.text()
        for path, was in ((home, "0o755"), (home / "parley.db", "0o644")):
            lines = [line for line in out.splitlines() if f"{path} was open to other" in line]
            assert len(lines) == 1, out
            assert "WARNING" in lines[0] and was in lines[0]
