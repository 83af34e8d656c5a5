"""Checks on the processes a runtime starts: whether they are still there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path


def is_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its new parent to reap it counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        # The entry can vanish between opening and reading it (ESRCH): the process is gone.
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


async def wait_gone(*pids: int) -> None:
    """Wait until every one of ``pids`` has exited; fail after 10 s."""
    deadline = time.monotonic() + 10
    while not all(is_gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if not is_gone(p)]}"
        await asyncio.sleep(0.02)
