"""The task hooks other capabilities subscribe to: called in order, unsubscribed on request, and
one subscriber's failure at a task's end does not keep the others from hearing of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest

from parley.core.channels import Channel, Task
from parley.core.ports import Tx
from parley.service.conversations.task_hooks import TaskHooks

TASK = Task(
    id="t1",
    channel_id="c1",
    trigger_id="m1",
    mode="group",
    members=["a"],
    rounds=1,
    created=datetime(2026, 1, 1, tzinfo=UTC),
)
TX = cast(Tx, object())


async def test_subscribers_hear_in_order_until_they_unsubscribe() -> None:
    hooks = TaskHooks()
    heard: list[str] = []

    async def first(task: Task) -> None:
        heard.append(f"first {task.id}")

    async def second(task: Task) -> None:
        heard.append(f"second {task.id}")

    stop_first = hooks.on_finished(first)
    hooks.on_finished(second)
    await hooks.finished(TASK)
    stop_first()
    stop_first()  # a second call is harmless
    await hooks.finished(TASK)
    assert heard == ["first t1", "second t1", "second t1"]


async def test_a_failing_subscriber_does_not_silence_the_others_at_the_end() -> None:
    hooks = TaskHooks()
    heard: list[str] = []

    async def broken(task: Task) -> None:
        raise RuntimeError("boom")

    async def listening(task: Task) -> None:
        heard.append(task.id)

    hooks.on_finished(broken)
    hooks.on_finished(listening)
    await hooks.finished(TASK)
    assert heard == ["t1"]


async def test_a_refusal_at_the_start_or_takeover_reaches_the_transaction() -> None:
    # These run inside the start's or the takeover's transaction: a refusal must roll it back.
    hooks = TaskHooks()

    async def refuse_start(tx: Tx, channel: Channel, task: Task) -> None:
        raise RuntimeError("refused start")

    async def refuse_takeover(tx: Tx, task: Task, why: str) -> None:
        raise RuntimeError(f"refused takeover: {why}")

    hooks.on_started(refuse_start)
    hooks.on_taken_over(refuse_takeover)
    channel = cast(Channel, object())
    with pytest.raises(RuntimeError, match="refused start"):
        await hooks.started(TX, channel, TASK)
    with pytest.raises(RuntimeError, match="refused takeover: gone"):
        await hooks.taken_over(TX, TASK, "gone")
