"""``parley serve`` on a full disk (a real one: a small tmpfs holding the data root) exits 1 with
an ``error [storage_full]`` line, like every other start-up failure: never a traceback, never an
announced hub. Whether the hub last stopped cleanly (SQLite then has to create its WAL files and
cannot) or was killed (the store opens, and ``hub.json`` cannot be written), on either store."""

from __future__ import annotations

import signal

import pytest

from tests.acceptance.cli_support import spawn_hub, wait_ready
from tests.full_disk import small_disk


@pytest.mark.parametrize("last_stop", ["stopped", "killed"])
async def test_serve_on_a_full_disk_exits_1_with_storage_full(
    backend: str, database_url: str, last_stop: str
) -> None:
    with small_disk() as disk:
        home = disk.path / "home"
        url = database_url if backend == "postgres" else None
        first = wait_ready(spawn_hub(home, database_url=url))
        if last_stop == "killed":
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait()
        assert first.stop() in (0, -signal.SIGKILL)
        disk.fill()

        again = spawn_hub(home, database_url=url)
        try:
            assert again.proc.wait(60) == 1
        finally:
            again.stop()
        output = again.output.until_end(30)
        assert "error [storage_full]: " in output, output
        assert "full" in output and "free space" in output, output
        assert "Traceback" not in output, output
        assert "running at" not in output, output
        disk.free()
        # With room again, the same data root serves.
        served = wait_ready(spawn_hub(home, database_url=url))
        assert served.stop() == 0
