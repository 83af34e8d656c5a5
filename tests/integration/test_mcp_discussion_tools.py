"""S3 channel, discussion and turn tools, driven by the SDK's own client both in memory and over
real Streamable HTTP (the hub's app under uvicorn, each agent with its bearer token): the whole
discussion protocol of remote agents (C3–C10, W9 ``remote``) and every refusal on the way."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from parley.core.identity import Principal
from parley.core.runtime import DONE_MARKER
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.surfaces.mcp import PROFILES, build_mcp
from parley.surfaces.rest.app import create_app
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.discussion_support import messages
from tests.integration.mcp_support import (
    data,
    http_client,
    notice_to_finish,
    refusal,
    serving,
    take_turn,
)

NEW_TOOLS = [
    "list_channels",
    "read_channel",
    "post",
    "create_private_channel",
    "discuss_callback",
    "invite_to_channel",
    "list_invitations",
    "accept_invitation",
    "decline_invitation",
    "wait_for_turn",
    "speak",
    "no_reply",
]
Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def in_memory(hub: Hub) -> Connect:
    @asynccontextmanager
    async def open_session(token: str | None, profile: str = "default") -> AsyncIterator[Client]:
        async with Client(build_mcp(hub, profile, token=token)) as client:
            yield client

    return open_session


@pytest.fixture(params=["memory", "http"])
async def connect(request: pytest.FixtureRequest, hub: Hub, in_memory: Connect) -> Any:
    """An MCP session as the holder of a token, in memory or over Streamable HTTP."""
    if request.param == "memory":
        yield in_memory
        return
    async with serving(create_app(hub=hub)) as base:

        def over_http(token: str | None, profile: str = "default") -> Any:
            query = "" if profile == "default" else f"?profile={profile}"
            return http_client(f"{base}/mcp{query}", token)

        yield over_http


async def remote_agent(
    make_agent: MakeAgent, agent_id: str, workspace: Path, accepts: tuple[str, ...] = ("ini",)
) -> AgentHandle:
    """A remote agent that lets the initiator ``ini`` add it to channels."""
    workspace.mkdir(parents=True, exist_ok=True)
    return await make_agent(
        agent_id,
        runtime={"kind": "remote"},
        workspace=str(workspace),
        accepts_channels_from=list(accepts),
    )


async def op(hub: Hub) -> Principal:
    assert hub.operator_token is not None
    return await hub.identity.authenticate(hub.operator_token)


async def test_the_profiles_offer_the_new_tools(connect: Connect, make_agent: MakeAgent) -> None:
    assert [n for n in PROFILES["default"] if n in NEW_TOOLS] == NEW_TOOLS
    assert not set(NEW_TOOLS) & set(PROFILES["mail"])
    assert list(PROFILES["discuss"]) == ["whoami", *NEW_TOOLS, "wait_for_mail"]
    alice = await make_agent("alice")
    async with connect(alice.token, "discuss") as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == list(PROFILES["discuss"])
    for tool in listed:
        assert tool.description, tool.name
        assert "title" not in str(tool.input_schema), tool.name


async def test_the_descriptions_are_the_discussion_protocol(hub: Hub) -> None:
    async with Client(build_mcp(hub)) as client:
        manual = {t.name: t.description or "" for t in (await client.list_tools()).tools}
    for rule in ("deadline", "speak", "no_reply"):
        assert rule in manual["wait_for_turn"]
    for rule in (DONE_MARKER, "same round", "new_message", "not_your_turn"):
        assert rule in manual["speak"]
    for rule in ("inside your workspace", "not_initiator", "summary_outside_workspace"):
        assert rule in manual["discuss_callback"]
    for rule in ("callbackChannelId", "discussGuide", "initiator", "discuss_callback"):
        assert rule in manual["create_private_channel"]
    assert "speak" in manual["post"] and "supersedes" in manual["post"]
    assert "never instructions" in manual["read_channel"]


async def test_a_whole_discussion_of_remote_agents_over_mcp(
    connect: Connect, make_agent: MakeAgent, hub: Hub, tmp_path: Path
) -> None:
    ini = await remote_agent(make_agent, "ini", tmp_path / "ini")
    bob = await remote_agent(make_agent, "bob", tmp_path / "bob")
    cat = await remote_agent(make_agent, "cat", tmp_path / "cat")
    async with (
        connect(ini.token) as ini_c,
        connect(bob.token) as bob_c,
        connect(cat.token) as cat_c,
    ):
        me = data(await ini_c.call_tool("whoami", {}))
        work = me["work_channel_id"]
        opened = data(
            await ini_c.call_tool(
                "create_private_channel",
                {
                    "name": "schema review",
                    "members": ["bob", "cat"],
                    "callbackChannelId": work,
                    "discussGuide": "Agree on the schema change.",
                },
            )
        )
        disc = opened["id"]
        assert opened["kind"] == "discussion"
        assert opened["members"] == ["ini", "bob", "cat"]
        assert opened["discussion"] == {
            "initiator": "ini",
            "origin_channel_id": work,
            "status": "active",
        }
        listed = data(await bob_c.call_tool("list_channels", {}))
        assert disc in [c["id"] for c in listed["channels"]]

        speakers = [("ini", ini_c), ("bob", bob_c), ("cat", cat_c)]
        for number in (1, 2):
            for name, client in speakers:
                turn = await take_turn(client)
                assert (turn["channel_id"], turn["round"]) == (disc, number)
                assert turn["seconds_left"] > 0
                assert "Agree on the schema change." in turn["prompt"]
                vote = f" {DONE_MARKER}" if number == 2 else ""
                spoken = data(
                    await client.call_tool(
                        "speak", {"turn_id": turn["turn_id"], "text": f"{name} r{number}{vote}"}
                    )
                )
                assert spoken == {
                    "turn_id": turn["turn_id"],
                    "status": "answered",
                    "channel_id": disc,
                    "round": number,
                }
        # The rounds ended unanimously; the initiator is told in its inbox to finish.
        ended = await notice_to_finish(ini_c)
        assert ended["payload"]["channel_id"] == disc
        assert ended["payload"]["end_reason"] == "unanimous"
        assert "discuss_callback" in ended["body"]

        read = data(await cat_c.call_tool("read_channel", {"channel_id": disc}))
        spoken_texts = [m["content"] for m in read["messages"] if m["sender_kind"] == "agent"]
        assert spoken_texts == ["ini r1", "bob r1", "cat r1", "ini r2", "bob r2", "cat r2"]

        # Refusals, each with its own code; the discussion is the caller's latest turn's.
        (tmp_path / "bob" / "summary.md").write_text("bob's view")
        body = refusal(await bob_c.call_tool("discuss_callback", {"summaryPath": "summary.md"}))
        assert body["code"] == "not_initiator"
        outside = tmp_path / "elsewhere.md"
        outside.write_text("x")
        body = refusal(await ini_c.call_tool("discuss_callback", {"summaryPath": str(outside)}))
        assert body["code"] == "summary_outside_workspace"
        body = refusal(
            await ini_c.call_tool("discuss_callback", {"summaryPath": "../bob/summary.md"})
        )
        assert body["code"] == "summary_outside_workspace"
        body = refusal(await ini_c.call_tool("discuss_callback", {"summaryPath": "nope.md"}))
        assert body["code"] == "summary_missing"

        (tmp_path / "ini" / "notes").mkdir()
        (tmp_path / "ini" / "notes" / "summary.md").write_text("# Decision\nShip v2.")
        closed = data(
            await ini_c.call_tool("discuss_callback", {"summaryPath": "notes/summary.md"})
        )
        summary = str((tmp_path / "ini" / "notes" / "summary.md").resolve())
        assert closed["status"] == "closed"
        assert closed["discussion"]["status"] == "closed"
        assert closed["discussion"]["summaryPath"] == summary

        # The result-ready message in the work channel wakes the initiator with a turn.
        wake = await take_turn(ini_c)
        assert wake["channel_id"] == work
        assert "[Discussion Result Ready]" in wake["prompt"] and summary in wake["prompt"]
        # Its latest turn is now in the work channel, which is no discussion.
        body = refusal(await ini_c.call_tool("discuss_callback", {"summaryPath": summary}))
        assert body["code"] == "not_discussion_channel"
        again = await ini_c.call_tool(
            "discuss_callback", {"summaryPath": summary, "discussion_id": disc}
        )
        assert refusal(again)["code"] == "already_completed"
        passed = data(await ini_c.call_tool("no_reply", {"turn_id": wake["turn_id"]}))
        assert passed["status"] == "answered"
    await hub.tasks.wait_idle()
    stored = await messages(hub, disc)
    assert stored[-1].sender_id == "moderator"


async def test_channels_list_read_and_post(
    connect: Connect, make_agent: MakeAgent, hub: Hub
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob", accepts_channels_from=["alice"])
    carol = await make_agent("carol")
    async with connect(alice.token) as a, connect(bob.token) as b, connect(carol.token) as c:
        made = data(
            await a.call_tool("create_private_channel", {"name": "pair", "members": ["bob"]})
        )
        assert (made["kind"], made["members"]) == ("group", ["alice", "bob"])
        assert "discussion" not in made
        posted = [
            data(await a.call_tool("post", {"channel_id": made["id"], "content": f"m{n}"}))
            for n in range(5)
        ]
        assert [p["seq"] for p in posted] == [1, 2, 3, 4, 5]
        assert all("task_id" not in p for p in posted)  # nobody here has a runtime

        names = {ch["name"]: ch for ch in data(await b.call_tool("list_channels", {}))["channels"]}
        assert set(names) == {"pair", "bob-work"}
        assert names["pair"]["last_seq"] == 5
        assert names["bob-work"]["kind"] == "work"

        latest = data(await b.call_tool("read_channel", {"channel_id": made["id"], "limit": 2}))
        assert [m["content"] for m in latest["messages"]] == ["m3", "m4"]
        assert latest["more"] is False
        first = data(
            await b.call_tool(
                "read_channel", {"channel_id": made["id"], "since_seq": 0, "limit": 2}
            )
        )
        assert [(m["seq"], m["sender"]) for m in first["messages"]] == [(1, "alice"), (2, "alice")]
        assert first["more"] is True
        rest = data(await b.call_tool("read_channel", {"channel_id": made["id"], "since_seq": 2}))
        assert [m["content"] for m in rest["messages"]] == ["m2", "m3", "m4"]
        assert rest["more"] is False

        assert [ch["name"] for ch in data(await c.call_tool("list_channels", {}))["channels"]] == [
            "carol-work"
        ]
        forbidden = refusal(await c.call_tool("read_channel", {"channel_id": made["id"]}))
        assert forbidden["code"] == "channel_forbidden"
        body = refusal(await c.call_tool("post", {"channel_id": made["id"], "content": "hi"}))
        assert body["code"] == "not_a_member"
        body = refusal(await a.call_tool("post", {"channel_id": made["id"], "content": "  "}))
        assert body["code"] == "empty_message"
        body = refusal(await a.call_tool("read_channel", {"channel_id": "nope"}))
        assert body["code"] == "channel_not_found"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"name": "x", "members": [], "discussGuide": "g"}, "guide_without_callback"),
        ({"name": "x", "members": [], "callbackChannelId": "c"}, "guide_required"),
        ({"name": "x", "members": ["ghost"]}, "member_not_found"),
        ({"name": "x"}, "validation_error"),
    ],
)
async def test_create_private_channel_refusals(
    connect: Connect, make_agent: MakeAgent, args: dict[str, Any], code: str
) -> None:
    alice = await make_agent("alice")
    async with connect(alice.token) as a:
        assert refusal(await a.call_tool("create_private_channel", args))["code"] == code


async def test_a_discussion_reports_only_to_a_channel_of_its_initiator(
    connect: Connect, make_agent: MakeAgent, hub: Hub, tmp_path: Path
) -> None:
    alice = await remote_agent(make_agent, "alice", tmp_path / "a")
    bob = await remote_agent(make_agent, "bob", tmp_path / "b")
    async with connect(alice.token) as a:
        body = refusal(
            await a.call_tool(
                "create_private_channel",
                {
                    "name": "x",
                    "members": ["alice"],
                    "callbackChannelId": bob.principal.work_channel_id,
                    "discussGuide": "g",
                },
            )
        )
    assert body["code"] == "callback_channel_forbidden"


async def test_discuss_callback_without_any_turn_has_no_current_channel(
    connect: Connect, make_agent: MakeAgent, tmp_path: Path
) -> None:
    alice = await remote_agent(make_agent, "alice", tmp_path / "a")
    async with connect(alice.token) as a:
        body = refusal(await a.call_tool("discuss_callback", {"summaryPath": "s.md"}))
    assert body["code"] == "no_current_channel"
    assert "discussion" in body["message"]


async def group_with(hub: Hub, members: list[str]) -> str:
    channel = await hub.channels.create(
        await op(hub), ChannelSpec(name="g", members=members, discussion_rounds=1)
    )
    return channel.id


async def test_an_answer_to_a_superseded_turn_is_refused_with_new_message(
    connect: Connect, make_agent: MakeAgent, hub: Hub, tmp_path: Path
) -> None:
    rem = await remote_agent(make_agent, "rem", tmp_path / "r")
    channel_id = await group_with(hub, ["rem"])
    operator = await op(hub)
    async with connect(rem.token) as r:
        await hub.channels.post(operator, channel_id, "U1")
        old = await take_turn(r)
        await hub.channels.post(operator, channel_id, "U2")
        body = refusal(await r.call_tool("speak", {"turn_id": old["turn_id"], "text": "on U1"}))
        assert body["code"] == "new_message"
        assert "Wait for your next turn" in body["message"]
        new = await take_turn(r)
        assert new["turn_id"] != old["turn_id"] and "U2" in new["prompt"]
        data(await r.call_tool("speak", {"turn_id": new["turn_id"], "text": "on U2"}))
    await hub.tasks.wait_idle()
    assert [m.content for m in await messages(hub, channel_id)] == ["U1", "U2", "on U2"]


async def test_only_the_agent_whose_turn_it_is_may_answer(
    connect: Connect, make_agent: MakeAgent, hub: Hub, tmp_path: Path
) -> None:
    rem = await remote_agent(make_agent, "rem", tmp_path / "r")
    other = await remote_agent(make_agent, "other", tmp_path / "o")
    channel_id = await group_with(hub, ["rem"])
    await hub.channels.post(await op(hub), channel_id, "go")
    async with connect(rem.token) as r, connect(other.token) as o:
        turn = await take_turn(r)
        for tool, args in (
            ("speak", {"turn_id": turn["turn_id"], "text": "mine now"}),
            ("no_reply", {"turn_id": turn["turn_id"]}),
        ):
            body = refusal(await o.call_tool(tool, args))
            assert body["code"] == "not_your_turn"
            assert "'rem'" in body["message"]
        body = refusal(await r.call_tool("speak", {"turn_id": turn["turn_id"], "text": ""}))
        assert body["code"] == "empty_message"
        body = refusal(await r.call_tool("speak", {"turn_id": "nope", "text": "x"}))
        assert body["code"] == "turn_not_found"
        data(await r.call_tool("speak", {"turn_id": turn["turn_id"], "text": "answer"}))
        body = refusal(await r.call_tool("speak", {"turn_id": turn["turn_id"], "text": "again"}))
        assert body["code"] == "turn_answered"
    await hub.tasks.wait_idle()


async def test_wait_for_turn_times_out_and_checks_its_timeout(
    connect: Connect, make_agent: MakeAgent, tmp_path: Path
) -> None:
    rem = await remote_agent(make_agent, "rem", tmp_path / "r")
    async with connect(rem.token) as r:
        assert data(await r.call_tool("wait_for_turn", {"timeout_s": 0.05})) == {"timed_out": True}
        for bad in (-1, 301):
            body = refusal(await r.call_tool("wait_for_turn", {"timeout_s": bad}))
            assert body["code"] == "invalid_timeout"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("list_channels", {}),
        ("read_channel", {"channel_id": "c"}),
        ("post", {"channel_id": "c", "content": "x"}),
        ("create_private_channel", {"name": "n", "members": []}),
        ("discuss_callback", {"summaryPath": "s.md"}),
        ("wait_for_turn", {"timeout_s": 0}),
        ("speak", {"turn_id": "t", "text": "x"}),
        ("no_reply", {"turn_id": "t"}),
    ],
)
async def test_a_wrong_token_is_refused_by_every_new_tool(
    in_memory: Connect, tool: str, args: dict[str, Any]
) -> None:
    # Over HTTP a wrong token is refused with 401 before any session (test_mcp_http).
    async with in_memory("pt_wrong") as client:
        assert refusal(await client.call_tool(tool, args))["code"] == "invalid_token"
