"""What other capabilities hang on a discussion task's life: a small subscription registry.

A worker becomes running in the commit that starts its turn's task, a meeting member awaiting
entry enters at its turn's end, a discussion's initiator is reminded when its rounds end. Those
capabilities sit above the tasks, so the tasks do not import them: each subscribes here (the
registry is created with the task runner, before any of them) and the runner calls what is
subscribed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from parley.core.channels import Channel, Task
from parley.core.ports import Tx
from parley.core.runtime import Turn

Started = Callable[[Tx, Channel, Task], Awaitable[None]]
"""(tx, channel, task), in the transaction that starts the task."""
Finished = Callable[[Task], Awaitable[None]]
"""(finished task), once its end has committed."""
TakenOver = Callable[[Tx, Task, str], Awaitable[None]]
"""(tx, ended task, why), in the transaction of a takeover that ended another hub's task."""
Running = Callable[[Turn], Awaitable[None]]
"""(turn), run beside the runtime's call for as long as it lasts, then cancelled."""


T = TypeVar("T")


def _subscribe(callbacks: list[T], callback: T) -> Callable[[], None]:
    callbacks.append(callback)

    def unsubscribe() -> None:
        with contextlib.suppress(ValueError):
            callbacks.remove(callback)

    return unsubscribe


class TaskHooks:
    """Callbacks on a task's start, end and takeover, called in the order they subscribed. Each
    ``on_*`` returns a callable that unsubscribes."""

    def __init__(self) -> None:
        self._started: list[Started] = []
        self._finished: list[Finished] = []
        self._taken_over: list[TakenOver] = []
        self.running: list[Running] = []

    def on_started(self, callback: Started) -> Callable[[], None]:
        return _subscribe(self._started, callback)

    def on_finished(self, callback: Finished) -> Callable[[], None]:
        return _subscribe(self._finished, callback)

    def on_taken_over(self, callback: TakenOver) -> Callable[[], None]:
        return _subscribe(self._taken_over, callback)

    def while_running(self, callback: Running) -> Callable[[], None]:
        """Run ``callback(turn)`` beside each turn's runtime call (a worker's live mail)."""
        return _subscribe(self.running, callback)

    async def started(self, tx: Tx, channel: Channel, task: Task) -> None:
        """A refusal here refuses the task's start: it runs in the start's transaction."""
        for callback in list(self._started):
            await callback(tx, channel, task)

    async def finished(self, task: Task) -> None:
        """The task's end has committed: one subscriber's failure does not keep the others
        from hearing of it."""
        for callback in list(self._finished):
            with contextlib.suppress(Exception):
                await callback(task)

    async def taken_over(self, tx: Tx, task: Task, why: str) -> None:
        for callback in list(self._taken_over):
            await callback(tx, task, why)
