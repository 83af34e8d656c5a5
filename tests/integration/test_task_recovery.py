"""What a starting hub does with tasks a dead hub left running (Q4): a task already told to stop
ends the way it was told (superseded, cancelled, closed, deleted), not ``interrupted``, and a
channel gets one "[Discussion Interrupted]" note however many of its tasks were cut off. The rows
are written as a hub killed mid-discussion leaves them."""

from __future__ import annotations

from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.channels import ChannelMessage, Task
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.integration.discussion_support import messages

DEAD = "a-dead-hub"


async def trigger(hub: Hub, channel_id: str, content: str) -> ChannelMessage:
    async def job(tx: Tx) -> ChannelMessage:
        return await hub.channels.append(
            tx, channel_id, sender_id="operator", sender_kind="human", content=content, trigger=True
        )

    return await hub.store.write(job)


async def running(hub: Hub, message: ChannelMessage, *, flagged: bool) -> Task:
    """A task row as a dead hub leaves it: running, owned by that hub, maybe flagged."""
    task = Task(
        id=new_ulid(),
        channel_id=message.channel_id,
        trigger_id=message.id,
        mode="group",
        members=["alpha"],
        rounds=1,
        owner=DEAD,
        cancel_requested=flagged,
        created=hub.ctx.clock.now(),
    )

    async def job(tx: Tx) -> None:
        tx.insert("tasks", task)

    await hub.store.write(job)
    return task


async def hub_with_alpha(settings: Settings, clock: FakeClock) -> tuple[Hub, str, Principal]:
    """A started hub with the agent ``alpha``, its operator token and operator."""
    hub = build_hub(settings, clock=clock, runtimes=StaticRuntimes())
    await hub.start(background=False)
    token = hub.operator_token
    assert token is not None
    operator: Principal = await hub.identity.authenticate(token)
    await hub.identity.create_agent(operator, AgentSpec(id="alpha", runtime={"kind": "scripted"}))
    return hub, token, operator


async def test_a_restart_keeps_how_stopped_tasks_ended_and_notes_each_channel_once(
    settings: Settings, clock: FakeClock
) -> None:
    first, token, operator = await hub_with_alpha(settings, clock)

    async def group() -> str:
        spec = ChannelSpec(name=f"g-{new_ulid()}", members=["alpha"])
        return (await first.channels.create(operator, spec)).id

    # U1's task was superseded by U2 (flagged in U2's transaction), then the hub died while
    # both were still running.
    busy = await group()
    old = await running(first, await trigger(first, busy, "U1"), flagged=True)
    new = await running(first, await trigger(first, busy, "U2"), flagged=False)
    # A task cancelled through DELETE /v1/tasks/{id} just before the crash.
    quiet = await group()
    cancelled = await running(first, await trigger(first, quiet, "U"), flagged=True)
    # A task whose group was deleted just before the crash.
    gone = await group()
    deleted = await running(first, await trigger(first, gone, "U"), flagged=True)

    async def delete(tx: Tx) -> None:
        await tx.update("channels", gone, status="deleted")

    await first.store.write(delete)
    await first.stop()

    second = build_hub(settings, clock=clock, runtimes=StaticRuntimes())
    await second.start(background=False)
    try:
        operator = await second.identity.authenticate(token)
        ends = {
            name: (await second.tasks.get(operator, task.id)).end_reason
            for name, task in {
                "old": old,
                "new": new,
                "cancelled": cancelled,
                "deleted": deleted,
            }.items()
        }
        assert ends == {
            "old": "superseded",
            "new": "interrupted",
            "cancelled": "cancelled",
            "deleted": "deleted",
        }
        notes = [m for m in await messages(second, busy) if m.sender_kind == "system"]
        assert [m.content.splitlines()[0] for m in notes] == ["[Discussion Interrupted]"]
        for channel_id in (quiet, gone):
            assert all(m.sender_kind != "system" for m in await messages(second, channel_id))
        assert await second.tasks.recover() == []
    finally:
        await second.stop()


async def test_two_cut_off_tasks_of_one_channel_give_one_note(
    settings: Settings, clock: FakeClock
) -> None:
    """Two unflagged tasks in one channel (as two hubs sharing a database may leave them)."""
    first, token, operator = await hub_with_alpha(settings, clock)
    channel_id = (
        await first.channels.create(operator, ChannelSpec(name="g", members=["alpha"]))
    ).id
    u = await trigger(first, channel_id, "U")
    tasks = [await running(first, u, flagged=False) for _ in range(2)]
    await first.stop()

    second = build_hub(settings, clock=clock, runtimes=StaticRuntimes())
    await second.start(background=False)
    try:
        operator = await second.identity.authenticate(token)
        for task in tasks:
            assert (await second.tasks.get(operator, task.id)).end_reason == "interrupted"
        notes = [m for m in await messages(second, channel_id) if m.sender_kind == "system"]
        assert len(notes) == 1
    finally:
        await second.stop()


async def test_a_task_committed_while_its_hub_stops_is_not_started_and_is_left_to_recovery(
    settings: Settings, clock: FakeClock
) -> None:
    """A post that commits after the hub began to stop does not start a run the stopping hub
    would never wait for; its task row stays running, for the next start to end."""
    hub, _, operator = await hub_with_alpha(settings, clock)
    try:
        channel = await hub.channels.create(operator, ChannelSpec(name="g", members=["alpha"]))
        await hub.tasks.stop()
        await hub.channels.post(operator, channel.id, "late")
        assert hub.tasks.live == {}
        async with hub.store.read() as tx:
            tasks = await tx.select("tasks")
        assert [t.status for t in tasks] == ["running"]
    finally:
        await hub.stop()
