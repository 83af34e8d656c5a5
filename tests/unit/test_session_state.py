"""The keeper of a turn's runtime state: what a runtime reports mid-turn is written at once,
each new value once and in order, and the turn's result has the last word (W1)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from parley.service.conversations.session_state import StateKeeper


class Store:
    """The writes a keeper makes; a write waits for ``gate`` when one is set, or fails."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []
        self.started: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.gate: asyncio.Event | None = None
        self.failures = 0

    async def save(self, state: dict[str, Any]) -> None:
        self.started.put_nowait(state)
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise OSError("the disk is full")
        self.writes.append(state)


async def settled(keeper: StateKeeper, final: dict[str, Any] | None = None) -> None:
    """Settle ``keeper`` and wait until what it was told is stored."""
    pending = keeper.settle(final)
    if pending is not None:
        await pending


async def test_a_reported_state_is_written_before_the_turn_ends_and_once() -> None:
    store = Store()
    keeper = StateKeeper({}, store.save)
    keeper.report({"thread": "t1"})
    keeper.report({"thread": "t1"})
    # Written in the background, before anything settles the turn.
    assert await store.started.get() == {"thread": "t1"}
    assert store.writes == [{"thread": "t1"}]
    await settled(keeper, {"thread": "t1"})  # the result says the same: nothing more to write
    assert store.writes == [{"thread": "t1"}]


async def test_the_value_stored_already_is_not_written_again() -> None:
    store = Store()
    keeper = StateKeeper({"session": "s1"}, store.save)
    keeper.report({"session": "s1"})
    assert keeper.settle({"session": "s1"}) is None  # nothing to write, nothing to wait for
    assert store.writes == []


async def test_values_reported_during_a_write_are_written_in_order_and_the_result_wins() -> None:
    store = Store()
    store.gate = asyncio.Event()
    keeper = StateKeeper({}, store.save)
    keeper.report({"session": "old"})
    assert await store.started.get() == {"session": "old"}  # waiting on the gate
    keeper.report({"session": "stale"})
    keeper.report({"session": "fresh"})
    ending = asyncio.ensure_future(settled(keeper, {"session": "new"}))
    store.gate.set()
    await ending
    # "old" was on its way; what came while it was written collapses to the latest value.
    assert store.writes == [{"session": "old"}, {"session": "new"}]
    keeper.report({"session": "late"})  # after the turn's end: not kept
    await settled(keeper)
    assert store.writes[-1] == {"session": "new"}


async def test_a_failed_background_write_is_retried_when_the_turn_settles() -> None:
    store = Store()
    store.failures = 1
    keeper = StateKeeper({}, store.save)
    keeper.report({"thread": "t1"})
    await settled(keeper)
    assert store.writes == [{"thread": "t1"}]


async def test_a_write_that_fails_at_the_end_fails_the_turn() -> None:
    store = Store()
    store.failures = 2
    keeper = StateKeeper({}, store.save)
    keeper.report({"thread": "t1"})
    with pytest.raises(OSError):
        await settled(keeper)
