"""The background runs a hub drives (discussion tasks, meetings): waiting for them all to end,
and stopping them all at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Protocol


class Driven(Protocol):
    """Something this hub drives in a background asyncio task of its own."""

    runner: asyncio.Task[Any] | None


async def wait_all(live: Mapping[str, Driven]) -> None:
    """Wait until ``live`` is empty: every run ended, including runs started meanwhile."""
    while live:
        runners = [lv.runner for lv in list(live.values()) if lv.runner is not None]
        await asyncio.gather(*runners, return_exceptions=True)


async def cancel_all(live: Mapping[str, Driven]) -> None:
    """Cancel every run in ``live`` and wait for each to unwind (its cleanup runs), including
    runs started while the others unwound."""
    while runs := [lv.runner for lv in list(live.values()) if lv.runner is not None]:
        for runner in runs:
            runner.cancel()
        for runner in runs:
            with contextlib.suppress(BaseException):
                await runner
        if all(lv.runner in runs for lv in live.values()):
            return  # what is left had already ended and is being removed
