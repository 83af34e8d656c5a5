"""A real filesystem a test fills up: a small tmpfs mounted for the test, and on PostgreSQL a
tablespace on it as a database's default, so that the server's own writes find the disk full.

Mounting needs root, which CI and the developers' machines have; a run without it outside CI
skips these tests, and fails them in CI, where they must run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from parley.config import Settings
from parley.core.ids import new_ulid
from tests.conftest import PG_ADMIN_URL, _pg_dsn

SIZE = "16m"
CHUNK = b"\0" * 65536


@dataclass
class SmallDisk:
    """A mounted tmpfs; ``fill`` takes every free byte, ``free`` gives them back."""

    path: Path

    @property
    def filler(self) -> Path:
        return self.path / "filler"

    def fill(self) -> None:
        with self.filler.open("ab", buffering=0) as f:
            try:
                while True:
                    f.write(CHUNK)
                    f.flush()
            except OSError:
                pass
        # What is left is less than one page: a write of a page or more finds no room.
        stat = os.statvfs(self.path)
        assert stat.f_bavail * stat.f_frsize < 4096, stat

    def free(self) -> None:
        self.filler.unlink()


@contextlib.contextmanager
def small_disk(size: str = SIZE) -> Iterator[SmallDisk]:
    """A tmpfs of ``size`` mounted on a new directory under the system's temporary directory
    (which the PostgreSQL server's user can reach, unlike pytest's own)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("these tests mount a small tmpfs, which needs root: run CI as root")
        pytest.skip("mounting a small tmpfs needs root")
    path = Path(tempfile.mkdtemp(prefix="parley-disk-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield SmallDisk(path)
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True, capture_output=True)
        path.rmdir()


async def _admin(*statements: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def store_on_small_disk(
    backend: str, home: Path
) -> AsyncIterator[tuple[SmallDisk, Settings]]:
    """Settings whose store lives on a small disk: the SQLite data root on it, or a new
    PostgreSQL database whose tables go to a tablespace on it (its catalog stays on the
    server's own disk, so connections still open when the small one is full)."""
    with small_disk() as disk:
        if backend == "sqlite":
            root = disk.path / "home"
            yield disk, Settings(home=root, database_url=f"sqlite:///{root / 'parley.db'}")
            return
        space = disk.path / "tablespace"
        space.mkdir()
        shutil.chown(space, "postgres", "postgres")
        name = f"parley_full_{new_ulid().lower()}"
        await _admin(
            f"CREATE TABLESPACE {name} LOCATION '{space}'",
            f'CREATE DATABASE "{name}"',
            f'ALTER DATABASE "{name}" SET default_tablespace = {name}',
        )
        try:
            yield disk, Settings(home=home, database_url=_pg_dsn(name))
        finally:
            await _admin(
                f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f"DROP TABLESPACE {name}"
            )
