"""Waiting for a hub to be idle waits for what a task's end sets off, not only for its turns:
a task leaves the running set before its end is recorded and its finished hooks (a child's
result, a meeting's next step) run."""

from __future__ import annotations

import asyncio

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.channels import Task
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import within


async def test_waiting_for_idle_waits_for_the_hooks_of_a_task_that_has_ended(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await make_agent("alpha", runtime={"kind": "scripted"})
    runtimes.set("alpha", ScriptedRuntime(lambda turn: "done"))
    channel = await hub.channels.create(
        operator, ChannelSpec(name=f"g-{new_ulid()}", members=["alpha"], discussion_rounds=1)
    )
    entered, release = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def slow_hook(task: Task) -> None:
        entered.set()
        await release.wait()
        seen.append(task.id)

    hub.tasks.hooks.on_finished(slow_hook)
    posted = await hub.channels.post(operator, channel.id, "go")
    await within(entered.wait(), "the finished hook")
    assert posted.task_id not in hub.tasks.live  # the task has left the running set
    idle = asyncio.ensure_future(hub.tasks.wait_idle())
    for _ in range(20):  # however often the loop turns, the hook still holds it
        await asyncio.sleep(0)
    assert not idle.done()
    release.set()
    await within(idle, "idle after the hook")
    assert seen == [posted.task_id]
