"""The store's writer: a job the database aborted to break a deadlock is run again."""

from __future__ import annotations

import types

import pytest

from parley.core.ports import Tx
from parley.service.hub import Hub


class Deadlock(Exception):
    """Shaped like a driver error for SQLSTATE 40P01 (deadlock_detected)."""

    def __init__(self) -> None:
        super().__init__("deadlock detected")
        self.orig = types.SimpleNamespace(sqlstate="40P01")


async def test_a_deadlocked_job_is_retried(hub: Hub) -> None:
    calls = 0

    async def job(tx: Tx) -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise Deadlock()
        return "committed"

    assert await hub.store.write(job) == "committed"
    assert calls == 3


async def test_retries_are_bounded_and_other_errors_are_not_retried(hub: Hub) -> None:
    calls = 0

    async def deadlocks(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        raise Deadlock()

    with pytest.raises(Deadlock):
        await hub.store.write(deadlocks)
    assert calls == 4

    calls = 0

    async def fails(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not a conflict")

    with pytest.raises(ValueError):
        await hub.store.write(fails)
    assert calls == 1
