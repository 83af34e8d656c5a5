"""Helpers for channel and discussion tests: barriers for scripted runtimes, prompt parsing and
bounded waits on observable state (never on time)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any
from unittest.mock import patch

from parley.core.channels import ChannelMessage, Invocation
from parley.core.runtime import Turn
from parley.service.hub import Hub

WAIT_S = 15.0


def transcript_of(turn: Turn) -> list[dict[str, Any]]:
    """The JSON transcript a speaker was shown."""
    text = turn.prompt.user_text()
    start = text.index("```json\n") + len("```json\n")
    end = text.index("\n```", start)
    data: list[dict[str, Any]] = json.loads(text[start:end])
    return data


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, *, bound_s: float = WAIT_S
) -> None:
    """Poll an observable condition until it holds, failing after a bounded deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def within(awaitable: Awaitable[Any], what: str = "an event") -> Any:
    """Await with a bounded deadline so a broken engine fails the test instead of hanging it."""
    try:
        return await asyncio.wait_for(awaitable, WAIT_S)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def as_another_hub(hub: Hub) -> AbstractContextManager[Any]:
    """Commits made inside the block set no cancel event in this process, as when another hub
    process makes them: a running task learns of them only from the store."""
    return patch.object(hub.tasks, "_signal", lambda _ids: None)


class Gate:
    """A barrier inside a runtime call: ``entered`` is set when the call starts, and the call
    returns only once ``release`` is set."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def wait(self) -> None:
        self.calls += 1
        self.entered.set()
        await self.release.wait()


async def messages(hub: Hub, channel_id: str) -> list[ChannelMessage]:
    async with hub.store.read() as tx:
        return await tx.channel_messages(channel_id, limit=1000)


async def invocations(hub: Hub, task_id: str) -> list[Invocation]:
    async with hub.store.read() as tx:
        i = tx.table("invocations").c
        rows: list[Invocation] = await tx.select("invocations", i.task_id == task_id)
    return sorted(rows, key=lambda inv: inv.id)


async def last_trigger(hub: Hub, channel_id: str) -> str | None:
    async with hub.store.read() as tx:
        return await tx.last_trigger_id(channel_id)
