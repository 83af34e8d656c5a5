"""Lists of rooms and channels (and a room's meetings, a channel's tasks) are paged by count and
by bytes as mail is: a page stops at its ``limit`` or once it holds the page budget, and says
where the rest begins in a ``Link`` header (``after``). The MCP tool, the CLI and the web UI
read them a page at a time too, and the UI shows one and links the next (the CLI, which follows
the pages, is in test_cli_room_channel_pages.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.config import Settings
from parley.core.errors import RuntimeFailure
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.service.tools.channels import list_channels
from parley.service.tools.registry import ToolCall
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import members, room_with
from tests.integration.test_security_paging import follow

BUDGET = 50_000
BIG = "x" * 19_990  # three rows holding one of these reach the budget
BASE = "http://parley.test"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"page_max_bytes": BUDGET})


async def big_rooms(hub: Hub, operator: Principal, n: int) -> list[str]:
    """Rooms whose config holds a long note, so that three fill a page."""
    ids = []
    for i in range(n):
        spec = RoomSpec.model_validate(
            {"name": f"r{i}", "config": {"moderator_runtime": {"kind": "none", "note": BIG}}}
        )
        ids.append((await hub.rooms.create(operator, spec)).id)
    return ids


async def big_discussions(hub: Hub, agent: Principal, n: int) -> list[str]:
    """Discussions whose guide is long, so that three fill a page."""
    assert agent.work_channel_id is not None
    ids = []
    for i in range(n):
        channel = await hub.discussions.create_private_channel(
            agent, f"d{i}", [], agent.work_channel_id, BIG
        )
        ids.append(channel.id)
    return ids


async def test_rooms_are_paged_by_bytes_and_count_with_a_link(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    rooms = await big_rooms(hub, operator, 7)
    op = api(hub.operator_token)
    got, links = await follow(op, "/v1/rooms?limit=100")
    assert [len(p) for p in got] == [3, 3, 1]
    assert links[0] == f"/v1/rooms?limit=100&after={rooms[2]}"
    assert [r["id"] for p in got for r in p] == rooms
    got, _ = await follow(op, "/v1/rooms?limit=2")
    assert [len(p) for p in got] == [2, 2, 2, 1]
    assert [r["id"] for p in got for r in p] == rooms
    # An agent pages through its own rooms only.
    a = await make_agent("a")
    own = await hub.rooms.create(a.principal, RoomSpec(name="mine"))
    got, links = await follow(api(a.token), "/v1/rooms?limit=1")
    assert (got, links) == ([[json.loads((await op.get(f"/v1/rooms/{own.id}")).text)]], [])


async def test_channels_and_groups_are_paged_by_bytes_and_count_with_a_link(
    hub: Hub, make_agent: MakeAgent, api: Any
) -> None:
    a = await make_agent("a")
    b = await make_agent("b")
    assert a.principal.work_channel_id is not None
    discussions = await big_discussions(hub, a.principal, 7)
    as_a = api(a.token)
    got, links = await follow(as_a, "/v1/channels")
    # The small work channel first, then the discussions, three of which fill a page.
    assert [len(p) for p in got] == [4, 3, 1]
    assert links[0] == f"/v1/channels?after={discussions[2]}"
    assert [c["id"] for p in got for c in p] == [a.principal.work_channel_id, *discussions]
    groups = [
        (await hub.channels.create(a.principal, ChannelSpec(name=f"g{i}"))).id for i in range(3)
    ]
    got, _ = await follow(as_a, "/v1/im/sessions?limit=2")
    assert [[c["id"] for c in p] for p in got] == [groups[:2], groups[2:]]
    # Another agent's channels are not in a's pages, nor a's in its.
    got, _ = await follow(api(b.token), "/v1/channels?limit=1")
    assert [c["id"] for p in got for c in p] == [b.principal.work_channel_id]


async def test_a_channel_s_tasks_and_a_room_s_meetings_are_paged(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    await make_agent("echo", runtime={"kind": "scripted"})

    async def reply(turn: Turn) -> str:
        return "noted"

    runtimes.set("echo", ScriptedRuntime(reply))
    group = await hub.channels.create(operator, ChannelSpec(name="g", members=["echo"]))
    for i in range(3):
        await hub.channels.post(operator, group.id, f"question {i}")
        await hub.tasks.wait_idle()
    op = api(hub.operator_token)
    tasks = [t.id for t in await hub.tasks.of_channel(operator, group.id)]
    assert len(tasks) == 3
    for path in (f"/v1/channels/{group.id}/tasks", f"/v1/im/sessions/{group.id}/tasks"):
        got, links = await follow(op, f"{path}?limit=2")
        assert [[t["id"] for t in p] for p in got] == [tasks[:2], tasks[2:]]
        assert links == [f"{path}?limit=2&after={tasks[1]}"]

    await members(make_agent, runtimes, ["m"])
    room = await room_with(hub, operator, ["m"], max_rounds=1)
    held = []
    for topic in ("one", "two"):
        held.append((await hub.meetings.convene(operator, room.id, ConveneSpec(topic=topic))).id)
        await hub.meetings.wait_idle()
        await hub.tasks.wait_idle()
    got, _ = await follow(op, f"/v1/rooms/{room.id}/meetings?limit=1")
    assert [[m["id"] for m in p] for p in got] == [[held[0]], [held[1]]]


async def test_the_list_channels_tool_pages_and_says_where_the_rest_begins(
    hub: Hub, make_agent: MakeAgent
) -> None:
    a = await make_agent("a")
    discussions = await big_discussions(hub, a.principal, 4)
    call = ToolCall(hub, a.principal)
    first = await list_channels.run(call, {})
    assert (first["count"], first["more"], first["next_after"]) == (4, True, discussions[2])
    rest = await list_channels.run(call, {"after": first["next_after"], "limit": 1})
    assert "more" not in rest and "next_after" not in rest
    listed = [c["id"] for c in first["channels"] + rest["channels"]]
    assert listed == [a.principal.work_channel_id, *discussions]


async def test_the_web_lists_show_a_page_and_link_the_next(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    rooms = await big_rooms(hub, operator, 4)
    a = await make_agent("a")
    discussions = await big_discussions(hub, a.principal, 4)
    from parley.surfaces.rest.app import create_app

    transport = httpx.ASGITransport(app=create_app(hub=hub))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as ui:
        r = await ui.post("/ui/signin", data={"token": a.token}, headers={"Origin": BASE})
        assert r.status_code == 303
        first = await ui.get("/ui/channels")
        shown = re.findall(r'href="/ui/channels/([0-9A-Z]+)"', first.text)
        assert shown == [a.principal.work_channel_id, *discussions[:3]]
        following = re.search(r'href="(/ui/channels\?after=[^"]+)" rel="next"', first.text)
        assert following is not None and following.group(1).endswith(discussions[2])
        rest = await ui.get(following.group(1))
        assert re.findall(r'href="/ui/channels/([0-9A-Z]+)"', rest.text) == discussions[3:]
        assert 'rel="next"' not in rest.text
        assert f'sse-connect="/ui/channels/live?after={discussions[2]}"' in rest.text

        r = await ui.post(
            "/ui/signin", data={"token": hub.operator_token}, headers={"Origin": BASE}
        )
        assert r.status_code == 303
        first = await ui.get("/ui/meetings")
        assert re.findall(r'id="room-(room-[0-9A-Z]+)"', first.text) == rooms[:3]
        following = re.search(r'href="(/ui/meetings\?after=[^"]+)" rel="next"', first.text)
        assert following is not None
        rest = await ui.get(following.group(1))
        assert re.findall(r'id="room-(room-[0-9A-Z]+)"', rest.text) == rooms[3:]


async def test_a_room_s_pulse_log_is_paged(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    api: Any,
    clock: FakeClock,
) -> None:
    await members(make_agent, runtimes, ["m"])
    room = await room_with(
        hub, operator, ["m"], silent_after_s=600.0, no_progress_after_s=600.0, max_rounds=1
    )
    first = await hub.pulse.pulse(operator, room.id)
    clock.advance(3600)
    second = await hub.pulse.pulse(operator, room.id)
    assert first.logged and second.logged and first.conclusion != second.conclusion
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    entries = [e.id for e in await hub.pulse.log(operator, room.id)]
    got, links = await follow(api(hub.operator_token), f"/v1/rooms/{room.id}/pulse?limit=1")
    assert [[e["id"] for e in p] for p in got] == [[entries[0]], [entries[1]]]
    assert links == [f"/v1/rooms/{room.id}/pulse?limit=1&after={entries[0]}"]


async def test_the_overview_shows_only_what_the_viewer_may_see(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    """The overview reads a few newest meetings and failed tasks and keeps those the viewer may
    see, instead of going through every room and channel."""

    async def fail(turn: Turn) -> str:
        raise RuntimeFailure("the model is down")

    a = await make_agent("a", runtime={"kind": "scripted"})
    runtimes.set("a", ScriptedRuntime(fail))
    assert a.principal.work_channel_id is not None
    await hub.channels.post(operator, a.principal.work_channel_id, "go")
    await hub.tasks.wait_idle()
    await members(make_agent, runtimes, ["m", "n"])
    theirs = await room_with(hub, operator, ["m"], max_rounds=1)
    ours = await room_with(hub, operator, ["n"], max_rounds=1)
    for room, topic in ((theirs, "their topic"), (ours, "our topic")):
        await hub.meetings.convene(operator, room.id, ConveneSpec(topic=topic))
        await hub.meetings.wait_idle()
        await hub.tasks.wait_idle()
    n_token = await hub.identity.issue_token(operator, "n", rotate=False)
    from parley.surfaces.rest.app import create_app

    transport = httpx.ASGITransport(app=create_app(hub=hub))
    shown = {}
    for who, token in (("n", n_token), ("operator", str(hub.operator_token))):
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as ui:
            r = await ui.post("/ui/signin", data={"token": token}, headers={"Origin": BASE})
            assert r.status_code == 303
            shown[who] = (await ui.get("/ui/")).text
    assert "our topic" in shown["n"] and "their topic" not in shown["n"]
    assert "ended: failed" not in shown["n"]
    assert "our topic" in shown["operator"] and "their topic" in shown["operator"]
    assert "ended: failed" in shown["operator"]
