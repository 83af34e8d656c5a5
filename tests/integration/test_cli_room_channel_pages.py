"""The CLI follows the pages of every room and channel list, so what it prints stays complete:
with a page budget of one byte each page holds a single row."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.config import Settings
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.surfaces.cli.app import app
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import members, room_with
from tests.integration.test_channels import Served
from tests.integration.test_security_paging import follow


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"page_max_bytes": 1})


async def every_id(client: httpx.AsyncClient, path: str) -> list[str]:
    got, _ = await follow(client, path)
    return [row["id"] for page in got for row in page]


async def test_the_cli_lists_of_rooms_channels_meetings_tasks_and_pulses_are_complete(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    clock: FakeClock,
    port: int,
    api: Any,
) -> None:
    await members(make_agent, runtimes, ["m"])
    room = await room_with(
        hub, operator, ["m"], silent_after_s=600.0, no_progress_after_s=600.0, max_rounds=1
    )
    rooms = [room.id] + [
        (await hub.rooms.create(operator, RoomSpec(name=f"r{i}"))).id for i in range(2)
    ]
    # A quiet pulse, then one that finds the room silent and escalates to a meeting.
    await hub.pulse.pulse(operator, room.id)
    clock.advance(3600)
    await hub.pulse.pulse(operator, room.id)
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    await hub.meetings.convene(operator, room.id, ConveneSpec(topic="two"))
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    op = api(hub.operator_token)
    meetings = await every_id(op, f"/v1/rooms/{room.id}/meetings")
    pulses = await every_id(op, f"/v1/rooms/{room.id}/pulse")
    assert (len(meetings), len(pulses)) == (2, 2)

    await make_agent("echo", runtime={"kind": "scripted"})

    async def reply(turn: Turn) -> str:
        return "noted"

    runtimes.set("echo", ScriptedRuntime(reply))
    groups = [
        (await hub.channels.create(operator, ChannelSpec(name=f"g{i}", members=["echo"]))).id
        for i in range(3)
    ]
    for i in range(2):
        await hub.channels.post(operator, groups[0], f"question {i}")
        await hub.tasks.wait_idle()
    tasks = await every_id(op, f"/v1/channels/{groups[0]}/tasks")
    channels = await every_id(op, "/v1/channels")
    assert len(tasks) == 2 and set(groups) <= set(channels)
    # The hub answers one row a page...
    got, _ = await follow(op, "/v1/rooms")
    assert [[r["id"] for r in page] for page in got] == [[r] for r in rooms]

    runner = CliRunner()
    async with Served(hub, port) as served:

        def cli(*args: str) -> Any:
            base = ["--url", served.url, "--token", str(hub.operator_token), "--json"]
            result = runner.invoke(app, [*base, *args])
            assert result.exit_code == 0, result.output
            return json.loads(result.output)

        async def ids(*args: str) -> list[str]:
            return [row["id"] for row in await asyncio.to_thread(cli, *args)]

        # ...and each CLI list still holds every row, in order.
        assert await ids("room", "list") == rooms
        assert await ids("room", "meetings", room.id) == meetings
        assert await ids("room", "pulse", room.id, "--log") == pulses
        assert await ids("channel", "list") == channels
        assert await ids("group", "list") == groups
        assert await ids("channel", "tasks", groups[0]) == tasks
        status = await asyncio.to_thread(cli, "discuss", "status", groups[0])
        assert [t["id"] for t in status["tasks"]] == tasks
