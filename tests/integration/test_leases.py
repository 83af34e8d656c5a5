"""Leases on running discussions (P2): a task is taken over by another hub only when its owner
is gone or its lease ran out; the hub that lost it stops at its next commit (the commit point
refuses the reply) and does not write the task's end over the takeover's.

The takeover is made by this hub's own runner under another hub id, as a second hub sharing the
database would make it; the lease expiry follows the fake clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import asyncpg
import pytest

from parley.adapters.bus.postgres import asyncpg_dsn
from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.bootstrap import build_hub
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import invocations, messages, within

OTHER_HUB = "01HUBTHATSHARESTHEDATABASE"


def plain(turn: Turn) -> str:
    return f"{turn.agent.id} r{turn.round}"


async def start_parked(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> tuple[str, str, asyncio.Event]:
    """A discussion whose first reply is parked between the provider's return and its commit;
    returns the channel, the task and the event that lets the commit go on."""
    for name in ("alpha", "beta"):
        await make_agent(name, runtime={"kind": "scripted"})
        runtimes.set(name, ScriptedRuntime(plain))
    spec = ChannelSpec(name="leased", members=["alpha", "beta"], discussion_rounds=1)
    channel_id = (await hub.channels.create(operator, spec)).id
    parked: asyncio.Queue[Turn] = asyncio.Queue()
    release = asyncio.Event()

    async def before_commit(turn: Turn) -> None:
        await parked.put(turn)
        await release.wait()

    hub.tasks.before_commit = before_commit
    posted = await hub.channels.post(operator, channel_id, "Plan it")
    await within(parked.get(), "alpha's reply before its commit")
    assert posted.task_id is not None
    return channel_id, posted.task_id, release


@pytest.fixture
async def other(
    postgres_only: None, hub: Hub, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[Hub]:
    """A second hub on the same database and clock, started without its sweeps."""
    second = build_hub(hub.settings.model_copy(update={"home": tmp_path / "b"}), clock=clock)
    await second.start(background=False)
    try:
        yield second
    finally:
        await second.stop()


async def take_over_as_another_hub(hub: Hub) -> list[str]:
    with patch.object(hub.tasks, "hub_id", OTHER_HUB):
        return [t.id for t in await hub.tasks.recover()]


async def test_a_live_owner_within_its_lease_keeps_its_task(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
) -> None:
    _, task_id, release = await start_parked(hub, operator, make_agent, runtimes)
    clock.advance(hub.settings.lease_s - 1)
    assert await take_over_as_another_hub(hub) == []
    release.set()
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, task_id)
    assert (task.end_reason, task.accepted) == ("max_rounds", 2)


async def test_a_hub_that_lost_its_lease_stops_at_its_next_commit(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
) -> None:
    channel_id, task_id, release = await start_parked(hub, operator, make_agent, runtimes)
    # The owner is alive (its liveness lock is held) but stopped renewing: paused, say.
    clock.advance(hub.settings.lease_s + 1)
    assert await take_over_as_another_hub(hub) == [task_id]
    taken = await hub.tasks.get(operator, task_id)
    assert (taken.status, taken.end_reason, taken.cancel_requested) == (
        "finished",
        "interrupted",
        True,
    )

    release.set()  # the old driver's reply reaches the commit point
    await hub.tasks.wait_idle()
    stored = await messages(hub, channel_id)
    assert [m.sender_kind for m in stored] == ["human", "system"]  # no reply after the note
    (call,) = await invocations(hub, task_id)
    assert (call.outcome, call.reason) == ("rejected", "cancelled")
    # The takeover's end stands; the old driver did not write its own over it.
    task = await hub.tasks.get(operator, task_id)
    assert (task.status, task.end_reason, task.finished) == (
        "finished",
        "interrupted",
        taken.finished,
    )


async def test_renewing_finds_a_lost_lease_and_stops_driving(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
) -> None:
    _, task_id, release = await start_parked(hub, operator, make_agent, runtimes)
    live = hub.tasks.live[task_id]
    await hub.tasks.renew_leases()
    assert not live.cancel.is_set()  # still held: renewed
    clock.advance(hub.settings.lease_s - 1)
    assert await take_over_as_another_hub(hub) == []  # the renewal moved the expiry on

    clock.advance(hub.settings.lease_s + 1)
    assert await take_over_as_another_hub(hub) == [task_id]
    await hub.tasks.renew_leases()
    assert live.cancel.is_set()
    release.set()
    await hub.tasks.wait_idle()


async def _waiting_on_a_lock(url: str, pids: set[int]) -> bool:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
    finally:
        await conn.close()
    return any(r["pid"] not in pids for r in rows)


async def test_a_reply_waiting_on_the_takeovers_lock_is_refused_when_it_commits(
    hub: Hub,
    other: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
) -> None:
    """Two hubs in one database. Hub B's takeover holds the channel row when hub A's reply
    (A alive, past its lease) reaches its commit and waits on that row; once B commits, the
    reply must be refused, although PostgreSQL re-checks it on the channel row alone."""
    channel_id, task_id, release = await start_parked(hub, operator, make_agent, runtimes)
    noting = asyncio.Event()
    go_on = asyncio.Event()
    post_note = other.tasks.transcripts.post_as_system

    async def slow_note(tx: Any, channel: str, text: str) -> Any:
        noting.set()  # inside B's takeover transaction, the channel row locked
        await go_on.wait()
        return await post_note(tx, channel, text)

    clock.advance(hub.settings.lease_s + 1)
    with patch.object(other.tasks.transcripts, "post_as_system", slow_note):
        takeover = asyncio.create_task(other.tasks.recover())
        await within(noting.wait(), "B's takeover to hold the channel row")
        release.set()  # A's reply goes to its commit and waits for the row
        deadline = asyncio.get_running_loop().time() + 15
        url = hub.settings.resolved_database_url()
        while not await _waiting_on_a_lock(url, set()):
            assert asyncio.get_running_loop().time() < deadline, "A's reply never waited"
            await asyncio.sleep(0.01)
        go_on.set()
        assert [t.id for t in await within(takeover, "the takeover")] == [task_id]
    await hub.tasks.wait_idle()
    stored = await messages(hub, channel_id)
    assert [m.sender_kind for m in stored] == ["human", "system"]
    (call,) = await invocations(hub, task_id)
    assert (call.outcome, call.reason) == ("rejected", "cancelled")


async def test_a_dead_hubs_task_is_taken_over_at_the_next_sweep_without_waiting_for_its_lease(
    hub: Hub,
    other: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
) -> None:
    channel_id, task_id, release = await start_parked(hub, operator, make_agent, runtimes)
    await other.sweep_leases()
    assert (await other.tasks.get(operator, task_id)).status == "running"  # A is alive
    # A's connection holding its liveness lock ends, as when its process is killed.
    liveness = hub.store._liveness  # type: ignore[attr-defined]
    liveness.terminate()
    hub.store._liveness = None  # type: ignore[attr-defined]
    await other.sweep_leases()  # the lease is still valid: the lock alone says A is gone
    task = await other.tasks.get(operator, task_id)
    assert (task.status, task.end_reason) == ("finished", "interrupted")
    release.set()
    await hub.tasks.wait_idle()
    stored = await messages(hub, channel_id)
    assert [m.sender_kind for m in stored] == ["human", "system"]
