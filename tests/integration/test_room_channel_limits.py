"""Per-principal limits on rooms and channels created (small configured limits here): one more is
refused with its own code, the operator is not limited, and what a principal created it can
see and delete, which frees its place."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from parley.adapters.store.sql import SqlTx
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import Conflict, NotFound
from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.identity import AgentSpec, HumanSpec
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.service.tools.channels import create_private_channel
from parley.service.tools.registry import ToolCall
from parley.service.tools.rooms import leave_room, meeting_status
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import eventually, within
from tests.integration.meeting_support import members

LIMIT = 2


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"rooms_per_principal": LIMIT, "channels_per_principal": LIMIT}
    )


def code(r: Any) -> tuple[int, str | None]:
    return r.status_code, (r.json() or {}).get("code") if r.content else None


async def test_rooms_past_the_limit_are_refused_and_a_creator_sees_and_deletes_its_own(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    a = await make_agent("a")
    b = await make_agent("b")
    as_a, as_b, op = api(a.token), api(b.token), api(hub.operator_token)
    mine = []
    for i in range(LIMIT):
        r = await as_a.post("/v1/rooms", json={"name": f"a{i}"})
        assert r.status_code == 201, r.text
        mine.append(r.json()["id"])
    r = await as_a.post("/v1/rooms", json={"name": "one too many"})
    assert code(r) == (409, "room_limit_reached")
    assert r.json()["details"]["limit"] == LIMIT and "delete one" in r.json()["message"]
    # a is in neither room, and still sees both, one by one and in its list.
    assert [x["id"] for x in (await as_a.get("/v1/rooms")).json()] == mine
    assert (await as_a.get(f"/v1/rooms/{mine[0]}")).status_code == 200
    # Nobody else's place is taken: another agent creates its own.
    assert (await as_b.post("/v1/rooms", json={"name": "b0"})).status_code == 201
    # b may neither see nor delete a's room; a human who did not create it may not delete it.
    assert code(await as_b.get(f"/v1/rooms/{mine[0]}")) == (403, "not_a_room_member")
    assert code(await as_b.delete(f"/v1/rooms/{mine[0]}")) == (403, "not_a_room_member")
    human = await hub.identity.create_human(operator, HumanSpec(id="hu"))
    assert code(await api(human.token).delete(f"/v1/rooms/{mine[0]}")) == (
        403,
        "room_owner_only",
    )
    # A room with members is not deleted; once they have left it is, and its place is free.
    await hub.rooms.join(operator, mine[0], "b")
    r = await as_a.delete(f"/v1/rooms/{mine[0]}")
    assert code(r) == (409, "room_not_empty") and r.json()["details"]["members"] == ["b"]
    await hub.rooms.leave(operator, mine[0], "b")
    assert (await as_a.delete(f"/v1/rooms/{mine[0]}")).status_code == 204
    assert code(await op.get(f"/v1/rooms/{mine[0]}")) == (404, "room_not_found")
    assert code(await as_a.post(f"/v1/rooms/{mine[0]}/members", json={"agent_id": "a"})) == (
        404,
        "room_not_found",
    )
    assert (await as_a.post("/v1/rooms", json={"name": "a2"})).status_code == 201
    assert code(await as_a.post("/v1/rooms", json={"name": "a3"})) == (409, "room_limit_reached")
    # Humans are limited as agents are; the operator is not.
    for i in range(LIMIT):
        await hub.rooms.create(human.principal, RoomSpec(name=f"h{i}"))
    with pytest.raises(Conflict) as caught:
        await hub.rooms.create(human.principal, RoomSpec(name="h"))
    assert caught.value.code == "room_limit_reached"
    for i in range(LIMIT + 2):
        assert (await op.post("/v1/rooms", json={"name": f"op{i}"})).status_code == 201


async def test_concurrent_room_creations_never_pass_the_limit(
    hub: Hub, make_agent: MakeAgent
) -> None:
    a = await make_agent("a")
    tries = [hub.rooms.create(a.principal, RoomSpec(name=f"r{i}")) for i in range(LIMIT + 4)]
    outcomes = await asyncio.gather(*tries, return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, Conflict)]
    assert len(outcomes) - len(refused) == LIMIT
    assert {o.code for o in refused} == {"room_limit_reached"}
    assert len(await hub.rooms.visible(a.principal)) == LIMIT


@pytest.mark.parametrize("table", ["rooms", "channels"])
async def test_two_hubs_creating_at_once_never_pass_the_limit(
    settings: Settings,
    clock: FakeClock,
    postgres_only: None,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
) -> None:
    """One hub has counted the principal's rooms (or channels) and not yet inserted when
    another hub creates one for the same principal: the second waits for the first to commit
    and then finds no place left."""
    first, second = (build_hub(settings, clock=clock, runtimes=StaticRuntimes()) for _ in "12")
    for hub in (first, second):
        await hub.start(background=False)
    counted, release = asyncio.Event(), asyncio.Event()
    original = SqlTx.count

    async def held(self: SqlTx, name: str, *where: Any) -> int:
        found = await original(self, name, *where)
        if name == table and not counted.is_set():
            counted.set()
            await within(release.wait(), "the test to release the first count")
        return found

    try:
        operator = await first.identity.authenticate(first.operator_token)
        created = await first.identity.create_agent(operator, AgentSpec(id="a"))
        agent = created.principal

        def create(hub: Hub, i: int) -> Awaitable[Any]:
            if table == "rooms":
                return hub.rooms.create(agent, RoomSpec(name=f"r{i}"))
            return hub.channels.create(agent, ChannelSpec(name=f"c{i}"))

        for i in range(LIMIT - 1):
            await create(first, i)
        monkeypatch.setattr(SqlTx, "count", held)
        one = asyncio.ensure_future(create(first, 10))
        await within(counted.wait(), "the first hub's count")
        other = asyncio.ensure_future(create(second, 11))
        waiting = await asyncpg.connect(database_url)
        try:

            async def blocked_or_done() -> bool:
                lock_waits = await waiting.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
                return other.done() or lock_waits > 0

            await eventually(blocked_or_done, "the second hub to wait or finish")
        finally:
            await waiting.close()
        release.set()
        outcomes = await within(asyncio.gather(one, other, return_exceptions=True))
        refused = [o for o in outcomes if isinstance(o, Conflict)]
        assert [o.code for o in refused] == [f"{table[:-1]}_limit_reached"], outcomes
        mine: Callable[[], Awaitable[list[Any]]] = (
            (lambda: first.rooms.visible(agent))
            if table == "rooms"
            else (lambda: first.channels.visible(agent, kinds=("group",)))
        )
        assert len(await mine()) == LIMIT
    finally:
        for hub in (first, second):
            await hub.stop()


async def test_no_member_joins_a_room_another_hub_is_deleting(
    settings: Settings, clock: FakeClock, postgres_only: None, database_url: str
) -> None:
    """A room is being deleted on one hub (found empty, not yet gone) when another hub adds a
    member: the join waits for the deletion and finds no room, so no member is left in a room
    that does not exist."""
    first, second = (build_hub(settings, clock=clock, runtimes=StaticRuntimes()) for _ in "12")
    for hub in (first, second):
        await hub.start(background=False)
    try:
        operator = await first.identity.authenticate(first.operator_token)
        await first.identity.create_agent(operator, AgentSpec(id="a"))
        room = await first.rooms.create(operator, RoomSpec(name="going"))
        found_empty, release = asyncio.Event(), asyncio.Event()
        member_rows = first.rooms.member_rows

        async def held(tx: Any, room_id: str) -> Any:
            rows = await member_rows(tx, room_id)
            found_empty.set()
            await within(release.wait(), "the test to release the deletion")
            return rows

        first.rooms.member_rows = held  # type: ignore[method-assign]
        deleting = asyncio.ensure_future(first.rooms.delete(operator, room.id))
        await within(found_empty.wait(), "the deletion to find the room empty")
        joining = asyncio.ensure_future(second.rooms.join(operator, room.id, "a"))
        waiting = await asyncpg.connect(database_url)
        try:

            async def blocked_or_done() -> bool:
                lock_waits = await waiting.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
                return joining.done() or lock_waits > 0

            await eventually(blocked_or_done, "the join to wait or finish")
        finally:
            await waiting.close()
        release.set()
        deleted, joined = await within(asyncio.gather(deleting, joining, return_exceptions=True))
        assert deleted.id == room.id
        assert isinstance(joined, NotFound) and joined.code == "room_not_found", joined
        async with second.store.read() as tx:
            assert await tx.get("room_members", "a") is None
    finally:
        for hub in (first, second):
            await hub.stop()


async def test_a_deleted_room_s_meetings_stay_on_the_record(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    await members(make_agent, runtimes, ["a"])
    room = await hub.rooms.create(operator, RoomSpec.model_validate({"name": "r"}))
    await hub.rooms.join(operator, room.id, "a")
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    await hub.rooms.post_brief(await hub.identity.require("a"), "a brief")
    await hub.rooms.leave(operator, room.id, "a")
    op = api(hub.operator_token)
    assert (await op.delete(f"/v1/rooms/{room.id}")).status_code == 204
    r = await op.get(f"/v1/rooms/meetings/{meeting.id}")
    assert r.status_code == 200 and r.json()["status"] == "ended"
    transcript = (await op.get(f"/v1/rooms/meetings/{meeting.id}/transcript")).json()
    assert transcript[0]["content"].startswith("[Meeting convened by operator]")
    async with hub.store.read() as tx:
        b = tx.table("briefs").c
        assert await tx.select("briefs", b.room_id == room.id) == []


async def test_channels_past_the_limit_are_refused_on_every_route_and_tool(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    a = await make_agent("a")
    as_a, op = api(a.token), api(hub.operator_token)
    groups = []
    for i in range(LIMIT):
        r = await as_a.post("/v1/channels", json={"name": f"g{i}"})
        assert r.status_code == 201, r.text
        groups.append(r.json()["id"])
    refusals = [
        await as_a.post("/v1/channels", json={"name": "g"}),
        await as_a.post("/v1/channels/private", json={"name": "p"}),
        await as_a.post("/v1/im/sessions", json={"name": "s"}),
    ]
    assert [code(r) for r in refusals] == [(409, "channel_limit_reached")] * 3
    assert refusals[0].json()["details"]["limit"] == LIMIT
    work = a.principal.work_channel_id
    assert work is not None
    with pytest.raises(Conflict) as caught:
        await create_private_channel.run(
            ToolCall(hub, a.principal),
            {"name": "d", "members": [], "callbackChannelId": work, "discussGuide": "g"},
        )
    assert caught.value.code == "channel_limit_reached"
    # What it created it sees and deletes, which frees a place.
    listed = [c["id"] for c in (await as_a.get("/v1/channels")).json()]
    assert set(groups) <= set(listed)
    assert (await as_a.delete(f"/v1/channels/{groups[0]}")).status_code == 200
    assert (await as_a.post("/v1/channels", json={"name": "again"})).status_code == 201
    # The operator is not limited.
    for i in range(LIMIT + 2):
        assert (await op.post("/v1/channels", json={"name": f"op{i}"})).status_code == 201


async def test_a_discussion_counts_while_open_and_frees_its_place_once_closed(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    a = await make_agent("a")
    work = a.principal.work_channel_id
    assert work is not None
    discussion = await hub.discussions.create_private_channel(a.principal, "d", [], work, "g")
    await hub.channels.create(a.principal, ChannelSpec(name="g"))
    with pytest.raises(Conflict) as caught:
        await hub.channels.create(a.principal, ChannelSpec(name="one more"))
    assert caught.value.code == "channel_limit_reached"
    await hub.discussions.force_close(operator, discussion.id, "done with it")
    await hub.tasks.wait_idle()
    await hub.channels.create(a.principal, ChannelSpec(name="now there is room"))


async def test_the_room_tools_act_on_the_agent_s_own_room_not_one_it_created(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    a = await make_agent("a")
    created = await hub.rooms.create(a.principal, RoomSpec(name="made by a"))
    joined = await hub.rooms.create(operator, RoomSpec(name="a's room"))
    await hub.rooms.join(a.principal, joined.id, "a")
    assert {r.id for r in await hub.rooms.visible(a.principal)} == {created.id, joined.id}
    call = ToolCall(hub, a.principal)
    status = await meeting_status.run(call, {})
    assert status["room"]["id"] == joined.id
    assert await leave_room.run(call, {}) == {"left": joined.id}
