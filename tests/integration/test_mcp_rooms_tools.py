"""S3 meeting-room tools (R1–R10) through the MCP server in memory: a whole meeting of three
remote agents taking their turns and writing their minutes over MCP, every refusal with its
code, briefs and the done mark, the emergency stop, an API agent using room tools through
function calling, and no tools in a meeting turn (R3)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from mcp import Client

from parley.core.identity import Principal
from parley.core.rooms import DEFAULT_SPEECH_LIMIT
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.service.tools.toolbox import NOT_IN_A_TURN
from parley.surfaces.mcp import PROFILES, build_mcp
from parley.testing import StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent
from tests.fakes.model_server import FakeCall, FakeReply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.mcp_support import WAIT_S, data, refusal, take_turn
from tests.integration.meeting_support import LabelledRuntime, Member

ROOM_TOOLS = [
    "join_room",
    "leave_room",
    "convene",
    "meeting_status",
    "stop_meeting",
    "post_brief",
    "mark_done",
]
Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect(hub: Hub) -> Connect:
    """An in-memory MCP session of the ``rooms`` profile as the holder of ``token``."""

    @asynccontextmanager
    async def open_session(token: str | None, profile: str = "rooms") -> AsyncIterator[Client]:
        async with Client(build_mcp(hub, profile, token=token)) as client:
            yield client

    return open_session


async def remote(make_agent: MakeAgent, *ids: str) -> list[AgentHandle]:
    return [await make_agent(agent_id, runtime={"kind": "remote"}) for agent_id in ids]


async def new_room(hub: Hub, operator: Principal, **config: object) -> str:
    # "sync", then "sync-2", ...: a name names one room.
    taken = len(await hub.rooms.visible(operator, limit=1000))
    name = "sync" if taken == 0 else f"sync-{taken + 1}"
    spec = RoomSpec.model_validate({"name": name, "config": config})
    return (await hub.rooms.create(operator, spec)).id


async def states(hub: Hub, room_id: str) -> dict[str, str]:
    """Each member's stored state (not the observed view)."""
    async with hub.store.read() as tx:
        rows = await hub.rooms.member_rows(tx, room_id)
    return {row.agent_id: row.state for row in rows}


async def minutes_mail(client: Client) -> dict[str, Any]:
    """The ``minutes`` mail in the caller's inbox, skipping the turn notices before it."""
    for _ in range(20):
        got = data(await client.call_tool("wait_for_mail", {"timeout_s": WAIT_S}))
        assert not got["timed_out"], "no minutes arrived"
        for msg in got["messages"]:
            if msg["kind"] == "minutes":
                return dict(msg)
    raise AssertionError("no minutes among the mail")


async def code_of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    return str(refusal(await client.call_tool(tool, arguments))["code"])


# -- the profile and its manual ------------------------------------------------------------------
async def test_the_rooms_profile_offers_the_room_and_turn_tools(
    connect: Connect, make_agent: MakeAgent
) -> None:
    (a,) = await remote(make_agent, "a")
    assert list(PROFILES["rooms"]) == [
        "whoami",
        *ROOM_TOOLS,
        "wait_for_turn",
        "speak",
        "no_reply",
        "wait_for_mail",
    ]
    # Not in "default", which stays within its token budget; a default agent still takes its
    # meeting turns with wait_for_turn and speak.
    assert not set(PROFILES["default"]) & set(ROOM_TOOLS)
    assert {"wait_for_turn", "speak"} <= set(PROFILES["default"])
    async with connect(a.token) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == list(PROFILES["rooms"])
    manual = {t.name: t.description or "" for t in listed}
    for rule in ("permission boundary", "One room", "member_busy", "member_in_meeting"):
        assert rule in manual["join_room"], rule
    for rule in (
        "not_a_room_member",
        "meeting_already_running",
        "nobody_can_enter",
        "nobody summoned",
        str(DEFAULT_SPEECH_LIMIT),
        "not posted",
        "minutes",
    ):
        assert rule in manual["convene"], rule
    assert "no room id" in manual["stop_meeting"]
    assert "rejected, not truncated" in manual["post_brief"]
    assert "latest" in manual["post_brief"]
    assert "activity state" in manual["mark_done"]
    assert "round x/y" in manual["meeting_status"]


# -- a whole meeting -----------------------------------------------------------------------------
async def test_three_remote_agents_hold_a_meeting_over_mcp(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    agents = await remote(make_agent, "a", "b", "c")
    room = await new_room(hub, operator, max_rounds=2)
    async with (
        connect(agents[0].token) as a,
        connect(agents[1].token) as b,
        connect(agents[2].token) as c,
    ):
        clients = {"a": a, "b": b, "c": c}
        for name, client in clients.items():
            joined = data(await client.call_tool("join_room", {"room_id": room}))
            assert (joined["agent_id"], joined["room_id"]) == (name, room)
            assert joined["state"] == "idle-waiting"

        convened = data(await a.call_tool("convene", {"topic": "Who owns the schema?"}))
        meeting = convened["meeting_id"]
        assert convened["present"] == ["a", "b", "c"]
        assert (convened["status"], convened["round"]) == ("running", "1/2")
        assert convened["convened_by"] == "a"

        status = data(await b.call_tool("meeting_status", {}))
        assert status["meeting"]["meeting_id"] == meeting
        assert status["meeting"]["topic"] == "Who owns the schema?"
        assert status["meeting"]["recent"][0]["speaker"] == "moderator"
        assert {m["state"] for m in status["room"]["members"]} == {"in-meeting"}

        # Without a moderator model, safe rotation gives the floor in roster order.
        said: list[tuple[str, str]] = []
        for number in (1, 2):
            for name, client in clients.items():
                turn = await take_turn(client)
                assert turn["channel_id"] == convened["channel_id"]
                assert turn["round"] == number
                assert "[Meeting]" in turn["prompt"]
                assert "Who owns the schema?" in turn["prompt"]
                text = f"{name} speaks in round {number}: I own my part of the schema."
                spoken = data(
                    await client.call_tool("speak", {"turn_id": turn["turn_id"], "text": text})
                )
                assert spoken["status"] == "answered"
                said.append((name, text))
        # After the round cap each member is asked for its own minutes, in one more turn.
        # The first is asked once the last speech is committed: the status shows them all.
        minutes_turns = {"a": await take_turn(a)}
        status = data(await c.call_tool("meeting_status", {"recent": 3}))
        assert status["meeting"]["round"] == "2/2"
        assert status["meeting"]["speeches"] == 6
        assert [r["text"] for r in status["meeting"]["recent"]] == [t for _, t in said[-3:]]
        written = {}
        for name, client in clients.items():
            turn = minutes_turns.get(name) or await take_turn(client)
            assert turn["channel_id"] == convened["channel_id"]
            assert "Write YOUR minutes" in turn["prompt"]
            written[name] = f"{name}'s minutes: I keep my part."
            await client.call_tool("speak", {"turn_id": turn["turn_id"], "text": written[name]})
        for name, client in clients.items():
            mail = await minutes_mail(client)
            assert (mail["body"], mail["payload"]["meeting_id"]) == (written[name], meeting)
            # The minutes wake the member in its work channel too.
            wake = await take_turn(client)
            assert wake["channel_id"] != convened["channel_id"]
            assert written[name] in wake["prompt"]
            await client.call_tool("no_reply", {"turn_id": wake["turn_id"]})
        await hub.meetings.wait_idle()
        await hub.tasks.wait_idle()

        ended = data(await b.call_tool("meeting_status", {"meeting_id": meeting}))
    assert ended["meeting"]["status"] == "ended"
    assert ended["meeting"]["end_reason"] == "round_cap"
    assert ended["room"]["members"] == [
        {"agent_id": name, "state": "idle-waiting"} for name in ("a", "b", "c")
    ]
    assert await states(hub, room) == {
        "a": "idle-waiting",
        "b": "idle-waiting",
        "c": "idle-waiting",
    }
    transcript = (await hub.meetings.transcript(operator, meeting)).rows
    spoken_rows = [(m.sender_id, m.content) for m in transcript if m.sender_kind == "agent"]
    assert spoken_rows == said
    minutes = await hub.meetings.minutes(operator, meeting)
    assert {(m.agent_id, m.status, m.text) for m in minutes} == {
        (name, "delivered", text) for name, text in written.items()
    }


async def test_a_speech_over_the_hard_limit_is_not_posted_and_the_turn_is_asked_again(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    (a,) = await remote(make_agent, "a")
    room = await new_room(hub, operator, max_rounds=1, speech_limit=100)
    async with connect(a.token) as client:
        await client.call_tool("join_room", {"room_id": room})
        meeting = data(await client.call_tool("convene", {"topic": "Limits"}))["meeting_id"]
        turn = await take_turn(client)
        await client.call_tool("speak", {"turn_id": turn["turn_id"], "text": "x" * 101})
        again = await take_turn(client)
        assert again["turn_id"] != turn["turn_id"]
        assert "101 characters" in again["prompt"] and "not posted" in again["prompt"]
        await client.call_tool("speak", {"turn_id": again["turn_id"], "text": "Short now."})
        minutes = await take_turn(client)
        assert "Write YOUR minutes" in minutes["prompt"]
        await client.call_tool("speak", {"turn_id": minutes["turn_id"], "text": "Ok."})
        await hub.meetings.wait_idle()
    transcript = (await hub.meetings.transcript(operator, meeting)).rows
    assert [m.content for m in transcript if m.sender_kind == "agent"] == ["Short now."]
    outcomes = [s.outcome for s in await hub.meetings.speeches(operator, meeting)]
    assert outcomes == ["over_limit", "accepted"]


# -- refusals -------------------------------------------------------------------------------------
async def test_membership_is_the_permission_boundary(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    a_handle, d_handle = await remote(make_agent, "a", "d")
    room = await new_room(hub, operator)
    other = await new_room(hub, operator)
    async with connect(a_handle.token) as a, connect(d_handle.token) as d:
        assert await code_of(a, "join_room", {"room_id": "room-nope"}) == "room_not_found"
        # An agent sees no room before joining one, yet may join one by its name.
        joined = data(await a.call_tool("join_room", {"room_id": "sync"}))
        assert joined["room_id"] == room
        assert await code_of(a, "join_room", {"room_id": other}) == "room_membership_exclusive"

        # d belongs to no room: it can neither convene, nor see, nor leave, brief or mark done.
        assert await code_of(d, "convene", {"topic": "t", "room_id": room}) == "not_a_room_member"
        assert await code_of(d, "convene", {"topic": "t"}) == "not_a_room_member"
        assert await code_of(d, "meeting_status", {}) == "not_a_room_member"
        assert await code_of(d, "leave_room", {"room_id": room}) == "not_a_room_member"
        assert await code_of(d, "post_brief", {"text": "hi"}) == "not_a_room_member"
        assert await code_of(d, "mark_done", {}) == "not_a_room_member"
        # Nor can it be summoned.
        summoned = {"topic": "t", "members": ["a", "d"]}
        assert await code_of(a, "convene", summoned) == "summon_non_member"
        assert await states(hub, room) == {"a": "idle-waiting"}

        meeting = data(await a.call_tool("convene", {"topic": "first"}))["meeting_id"]
        assert await code_of(a, "convene", {"topic": "second"}) == "meeting_already_running"
        assert await code_of(d, "meeting_status", {"meeting_id": meeting}) == "not_a_room_member"
        # In a meeting a member neither joins, leaves nor marks its work done.
        assert await code_of(a, "join_room", {"room_id": other}) == "member_in_meeting"
        assert await code_of(a, "leave_room", {}) == "member_in_meeting"
        assert await code_of(a, "mark_done", {}) == "member_in_meeting"

        # The stop takes no room id: d stops nothing, a stops its room's meeting.
        assert data(await d.call_tool("stop_meeting", {})) == {
            "stopped": [],
            "count": 0,
            "emergency": True,
        }
        assert (await hub.meetings.get(operator, meeting)).status == "running"
        stopped = data(await a.call_tool("stop_meeting", {}))
        assert stopped["count"] == 1
        [view] = stopped["stopped"]
        assert (view["meeting_id"], view["status"], view["end_reason"]) == (
            meeting,
            "ended",
            "stopped",
        )
        assert await states(hub, room) == {"a": "idle-waiting"}
        assert await hub.meetings.minutes(operator, meeting) == []

        assert data(await a.call_tool("leave_room", {})) == {"left": room}
        joined = data(await a.call_tool("join_room", {"room_id": other}))
        assert joined["room_id"] == other


async def test_a_working_member_awaits_entry_and_nobody_is_left_half_summoned(
    hub: Hub,
    operator: Principal,
    connect: Connect,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
) -> None:
    (a_handle,) = await remote(make_agent, "a")
    w_handle = await make_agent("w", runtime={"kind": "scripted"})
    worker = Member("w", model="model-w", work_gate=asyncio.Event())
    runtimes.set("w", LabelledRuntime(worker))
    room = await new_room(hub, operator)
    await hub.rooms.join(operator, room, "w")
    work = w_handle.principal.work_channel_id
    assert work is not None and worker.work_gate is not None
    await hub.channels.post(operator, work, "Build the index.")
    await worker.work_started.wait()
    try:
        async with connect(a_handle.token) as a, connect(w_handle.token) as w:
            await a.call_tool("join_room", {"room_id": room})
            body = refusal(await a.call_tool("convene", {"topic": "t", "members": ["w"]}))
            assert body["code"] == "nobody_can_enter"
            assert "'w'" in body["message"]
            assert await states(hub, room) == {"w": "idle-waiting", "a": "idle-waiting"}
            assert await hub.meetings.of_room(operator, room) == []
            # Joining or leaving changes what a running agent is told: not while it works.
            assert await code_of(w, "leave_room", {}) == "member_busy"
            status = data(await a.call_tool("meeting_status", {}))
            assert status == {
                "room": {
                    "id": room,
                    "members": [
                        {"agent_id": "a", "state": "idle-waiting"},
                        {"agent_id": "w", "state": "working"},
                    ],
                },
                "meeting": None,
            }
            # With someone able to enter, the working member awaits entry at its turn's end.
            convened = data(await a.call_tool("convene", {"topic": "t"}))
            assert (convened["present"], convened["awaiting"]) == (["a"], ["w"])
            stopped = data(await w.call_tool("stop_meeting", {}))
            [view] = stopped["stopped"]
            # A member that never came counts as absent once the meeting is over.
            assert (view["present"], view["absent"], view.get("awaiting")) == (["a"], ["w"], None)
            # Each is restored to what the summons found: w was working, a idle.
            assert await states(hub, room) == {"w": "working", "a": "idle-waiting"}
    finally:
        worker.work_gate.set()
        await hub.tasks.wait_idle()


async def test_briefs_are_bounded_and_the_latest_kept_and_done_is_the_members_own(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    (a_handle,) = await remote(make_agent, "a")
    room = await new_room(hub, operator, briefs_kept=2, brief_max_chars=60)
    async with connect(a_handle.token) as a:
        await a.call_tool("join_room", {"room_id": room})
        for n in (1, 2, 3):
            brief = data(await a.call_tool("post_brief", {"text": f"step {n} of the index"}))
            assert (brief["room_id"], brief["chars"]) == (room, len(f"step {n} of the index"))
        body = refusal(await a.call_tool("post_brief", {"text": "x" * 61}))
        assert (body["code"], body["details"]) == ("brief_too_long", {"limit": 60, "size": 61})
        assert await code_of(a, "post_brief", {"text": "   "}) == "empty_brief"
        assert await code_of(a, "post_brief", {"text": ""}) == "validation_error"
        board = await hub.rooms.board(operator, room)
        assert [b.text for b in board] == ["step 2 of the index", "step 3 of the index"]

        done = data(await a.call_tool("mark_done", {}))
        assert (done["agent_id"], done["room_id"], done["state"]) == ("a", room, "done")
        assert await states(hub, room) == {"a": "done"}
        again = data(await a.call_tool("mark_done", {"done": False}))
        assert again["state"] == "idle-waiting"
        assert await states(hub, room) == {"a": "idle-waiting"}


async def test_a_caller_outside_every_room_names_the_room_or_meeting(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    """The operator belongs to no room: it must name the room to convene and the meeting to
    look at, and its stop stops every meeting."""
    await remote(make_agent, "a")
    room = await new_room(hub, operator)
    await hub.rooms.join(operator, room, "a")
    assert hub.operator_token is not None
    async with connect(hub.operator_token) as op:
        assert await code_of(op, "convene", {"topic": "t"}) == "room_id_required"
        assert await code_of(op, "meeting_status", {}) == "meeting_id_required"
        convened = data(await op.call_tool("convene", {"topic": "t", "room_id": room}))
        # A human speaks without a turn; a long interjection is clipped in the status only.
        await hub.meetings.post(operator, convened["meeting_id"], "y" * 2500)
        args = {"meeting_id": convened["meeting_id"], "recent": 1}
        status = data(await op.call_tool("meeting_status", args))
        assert status["meeting"]["present"] == ["a"]
        [interjection] = status["meeting"]["recent"]
        assert (interjection["speaker"], interjection["kind"]) == (operator.id, "human")
        assert interjection["text"] == "y" * 2000 + "…"
        assert interjection["clipped"] is True
        stopped = data(await op.call_tool("stop_meeting", {}))
    assert [m["meeting_id"] for m in stopped["stopped"]] == [convened["meeting_id"]]
    assert (await hub.meetings.get(operator, convened["meeting_id"])).end_reason == "stopped"


# -- an API agent, by function calling -----------------------------------------------------------
async def test_an_api_agent_uses_room_tools_through_function_calling(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    async with FakeOpenAIServer() as model:
        alice = await make_agent(
            "alice",
            runtime={
                "kind": "openai",
                "model": "fake-model",
                "base_url": model.base_url,
                "api_key": "test-key",
                "max_retries": 0,
            },
        )
        room = await new_room(hub, operator)
        await hub.rooms.join(operator, room, "alice")
        model.script(
            FakeReply(
                text="",
                calls=[
                    FakeCall("post_brief", {"text": "indexing, half done"}),
                    FakeCall("meeting_status", {}),
                    FakeCall("join_room", {"room_id": room}),
                ],
            ),
            FakeReply(text="Briefed the room."),
        )
        work = alice.principal.work_channel_id
        assert work is not None
        posted = await hub.channels.post(operator, work, "Tell the room where you are.")
        await hub.tasks.wait_idle()
        task = await hub.tasks.get(operator, posted.task_id or "")

    assert task.end_reason != "failed", task.error
    offered = [t["function"]["name"] for t in model.requests[0]["tools"]]
    assert [n for n in offered if n in ROOM_TOOLS] == [
        n for n in ROOM_TOOLS if n not in NOT_IN_A_TURN
    ]
    assert "join_room" not in offered and "leave_room" not in offered
    results = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    brief, status, join = results
    assert json.loads(brief)["room_id"] == room
    assert json.loads(status)["room"]["members"] == [{"agent_id": "alice", "state": "working"}]
    assert join.startswith("unknown_tool: ")
    board = await hub.rooms.board(operator, room)
    assert [(b.agent_id, b.text) for b in board] == [("alice", "indexing, half done")]


async def test_an_api_agents_meeting_turns_offer_no_tools(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    """A meeting is for talking (R3): the room tools an API agent has in its own turns are not
    offered in its speech or its minutes."""
    async with FakeOpenAIServer() as model:
        await make_agent(
            "alice",
            runtime={
                "kind": "openai",
                "model": "fake-model",
                "base_url": model.base_url,
                "api_key": "test-key",
                "max_retries": 0,
            },
        )
        room = await new_room(hub, operator, max_rounds=1)
        await hub.rooms.join(operator, room, "alice")
        model.script(
            FakeReply(text="I stand at the index and need the schema."),
            FakeReply(text="Index: mine."),
        )
        spec = ConveneSpec(topic="Where are we?")
        meeting = await hub.meetings.convene(operator, room, spec)
        await hub.meetings.wait_idle()
        await hub.tasks.wait_idle()

    ended = await hub.meetings.get(operator, meeting.id)
    assert (ended.end_reason, ended.speeches) == ("round_cap", 1)
    [minutes] = await hub.meetings.minutes(operator, meeting.id)
    assert (minutes.status, minutes.text) == ("delivered", "Index: mine.")
    speech, written = model.requests[:2]
    assert "[Meeting]" in json.dumps(speech["messages"])
    assert "Write YOUR minutes" in json.dumps(written["messages"])
    assert "tools" not in speech and "tools" not in written
