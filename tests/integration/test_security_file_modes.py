"""The data root holds everyone's mail, agents' runtime keys and the operator token: it is 0700
and every file parley keeps in it 0600, SQLite's WAL and shared-memory files included, and a
data root left open to others by an older parley is restricted at start with one warning line
per path. (``test_security_file_modes_serve`` checks the same of a real ``parley serve``.)"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.bootstrap import build_hub
from parley.config import Settings
from parley.home import read_hub_info, write_hub_info, write_operator_token
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.integration.mail_support import send

# The modes of the files the store creates in a data root it starts on.
pytestmark = pytest.mark.fresh_database


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def modes(root: Path) -> dict[str, int]:
    """The mode of the data root ('.') and of everything in it."""
    found = {".": mode(root)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = mode(path)
    return found


def private(root: Path) -> dict[str, int]:
    return {name: 0o700 if (root / name).is_dir() else 0o600 for name in modes(root)}


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """A umask that leaves new files readable by others, as most login sessions have: what
    parley makes private it must make private itself."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


async def start(settings: Settings, clock: FakeClock, runtimes: StaticRuntimes) -> Hub:
    hub = build_hub(settings, clock=clock, runtimes=runtimes)
    await hub.start(background=False)
    return hub


async def some_writes(hub: Hub) -> None:
    assert hub.operator_token is not None
    operator = await hub.identity.authenticate(hub.operator_token)
    await hub.identity.create_agent(operator, AgentSpec(id="alice"))
    for n in range(20):
        await send(hub, operator, "alice", subject=f"mail {n}", body="x" * 2000)


def checkpoint(database: Path) -> None:
    """Copy the WAL into the database file now, as the store's checkpointer does every second."""
    conn = sqlite3.connect(database)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


async def test_a_fresh_data_root_and_every_file_in_it_are_private(
    settings: Settings, clock: FakeClock, runtimes: StaticRuntimes, backend: str
) -> None:
    root = settings.data_root()
    hub = await start(settings, clock, runtimes)
    token = hub.operator_token
    try:
        assert token is not None
        write_operator_token(root, token)
        write_hub_info(root, "http://127.0.0.1:1")
        await some_writes(hub)
        if backend == "sqlite":
            assert (root / "parley.db-wal").exists() and (root / "parley.db-shm").exists()
            checkpoint(root / "parley.db")
        assert modes(root) == private(root)
    finally:
        await hub.stop()
    expected = {".", "operator.token", "hub.json"}
    if backend == "sqlite":
        expected |= {"parley.db", "parley.db.lock"}
    assert expected <= set(modes(root))
    # Closing the store removes the WAL; the next start creates new WAL files, private too.
    wal = root / "parley.db-wal"
    assert not wal.exists()
    hub = await start(settings, clock, runtimes)
    try:
        await send(hub, await hub.identity.authenticate(token), "alice")
        assert wal.exists() == (backend == "sqlite")
        assert modes(root) == private(root)
    finally:
        await hub.stop()


async def test_a_data_root_open_to_others_is_restricted_at_start_with_a_warning(
    settings: Settings,
    clock: FakeClock,
    runtimes: StaticRuntimes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = settings.data_root()
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    database = root / "parley.db"
    sqlite3.connect(database).close()
    for name in ("parley.db", "operator.token", "hub.json"):
        (root / name).touch()
        (root / name).chmod(0o644)
    (root / "demo").mkdir(mode=0o755)
    (root / "demo").chmod(0o755)
    opened = {".": 0o755, "parley.db": 0o644, "operator.token": 0o644, "hub.json": 0o644}
    opened["demo"] = 0o755
    assert modes(root) == opened
    with caplog.at_level(logging.WARNING, logger="parley.files"):
        hub = await start(settings, clock, runtimes)
    try:
        assert modes(root) == private(root)
        warned = [r.getMessage() for r in caplog.records if r.name == "parley.files"]
        for name in opened:
            path = root if name == "." else root / name
            lines = [line for line in warned if line.startswith(f"{path} was open to other users")]
            assert len(lines) == 1, (name, warned)
            assert oct(opened[name]) in lines[0]
        assert len(warned) == len(opened), warned
    finally:
        await hub.stop()
    # Once private, a restart has nothing to fix.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="parley.files"):
        hub = await start(settings, clock, runtimes)
    await hub.stop()
    assert [r for r in caplog.records if r.name == "parley.files"] == []


def test_the_hub_info_is_replaced_whole_never_rewritten_in_place(tmp_path: Path) -> None:
    """A CLI reading ``hub.json`` while a starting hub rewrites it finds the old file or the new
    one, never a truncated one: the new text goes to a new file renamed over the old."""
    write_hub_info(tmp_path, "http://127.0.0.1:1")
    old = (tmp_path / "hub.json").read_text()
    with (tmp_path / "hub.json").open() as reading:
        write_hub_info(tmp_path, "http://127.0.0.1:2")
        assert reading.read() == old
    assert read_hub_info(tmp_path)["url"] == "http://127.0.0.1:2"
    assert [path.name for path in tmp_path.iterdir()] == ["hub.json"]  # no temporary file left
    assert mode(tmp_path / "hub.json") == 0o600
