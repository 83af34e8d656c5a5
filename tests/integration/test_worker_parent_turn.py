"""A child's result never cuts its parent's running turn (W3): a parent blocked on a child that
reports while the parent still works keeps that turn, its reply is posted, and the result wakes
it once the turn has ended; a parent not in a turn is woken at once, as before."""

from __future__ import annotations

import asyncio
from typing import Any

from parley.core.identity import Principal
from parley.core.ports import Subscription
from parley.service.hub import Hub
from parley.service.workers.records import WORKERS_TOPIC, SpawnSpec, StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.test_workers import scripted

WAIT_S = 30.0


async def until_state(sub: Subscription, worker_id: str, state: str) -> dict[str, Any]:
    """The worker's record once the bus says it reached ``state`` (bounded)."""

    async def watch() -> dict[str, Any]:
        while True:
            data = await sub.get()
            worker = data.get("worker") or {}
            if worker.get("id") == worker_id and worker.get("state") == state:
                return dict(worker)

    return await asyncio.wait_for(watch(), WAIT_S)


async def test_a_blocked_parents_running_turn_is_not_cut_by_its_childs_result(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    lead.replies = lambda turn: f"lead answered turn {len(lead.turns)}"
    helper = await scripted(make_agent, runtimes, "helper")
    helper.replies = lambda turn: "found 3 flaky tests"
    working = lead.gate("Audit the tests")
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await lead.started["Audit the tests"].wait()
    first_task = (await hub.workers.get(operator, root.id)).task_id

    sub = hub.bus.subscribe([WORKERS_TOPIC])
    try:
        child = await hub.workers.spawn(
            operator,
            root.id,
            SpawnSpec(prompt="Find the flaky tests", agent_id="helper", block_parent=True),
        )
        await until_state(sub, child.id, "completed")
    finally:
        await sub.close()
    # The parent is still in its first turn, still blocked: the result waits for the turn.
    parent = await hub.workers.get(operator, root.id)
    assert parent.task_id == first_task and parent.state == "running"
    assert parent.blocked_on_message_id == child.dispatch_message_id

    working.set()
    await hub.tasks.wait_idle()
    async with hub.store.read() as tx:
        first = await tx.get("tasks", first_task)
        replies = [
            m.content
            for m in await tx.channel_messages(root.channel_id, latest=50)
            if m.sender_kind == "agent"
        ]
    # The turn ended with its reply posted, not superseded; then the result woke the parent.
    assert first.end_reason == "replied"
    assert replies == ["lead answered turn 1", "lead answered turn 2"]
    assert "[TASK RESULT]" in lead.turns[1].prompt.render()
    assert "found 3 flaky tests" in lead.turns[1].prompt.render()
    after = await hub.workers.get(operator, root.id)
    assert after.blocked_on_message_id is None and after.state == "idle"
    assert len(lead.turns) == 2


async def test_a_result_read_in_a_resumed_turns_mail_block_unblocks_the_parent(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    helper = await scripted(make_agent, runtimes, "helper")
    helper.replies = lambda turn: "found 3 flaky tests"
    lead.gate("Audit the tests")
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await lead.started["Audit the tests"].wait()
    sub = hub.bus.subscribe([WORKERS_TOPIC])
    try:
        child = await hub.workers.spawn(
            operator,
            root.id,
            SpawnSpec(prompt="Find the flaky tests", agent_id="helper", block_parent=True),
        )
        await until_state(sub, child.id, "completed")
    finally:
        await sub.close()
    # The parent's turn is cut (a takeover): the result waits for the turn that follows, and
    # that turn reads it in its mail block, so nothing is left to wake the parent for.
    await hub.workers.takeover(operator, root.id, "Stop and summarise.", timeout_s=30)
    await hub.tasks.wait_idle()
    assert "found 3 flaky tests" in lead.turns[-1].prompt.render()
    after = await hub.workers.get(operator, root.id)
    assert after.blocked_on_message_id is None and after.state == "idle"
