"""Live push (M5, W9 ``remote``): whatever concerns an agent wakes its waiting ``wait_for_turn``
or ``wait_for_mail`` at once through the bus — a turn offered to it, the result-ready message in
its work channel (a wake turn for a remote agent, an inbox notice for an agent without a
runtime) — and its SSE inbox stream shows the same notices."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from mcp import Client

from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.conversations.turns import turns_topic
from parley.service.hub import Hub
from parley.service.mail.mailbox import inbox_topic
from parley.surfaces.mcp import build_mcp
from parley.surfaces.rest.app import create_app
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.discussion_support import within
from tests.integration.mcp_support import data, serving, until

READ_TIMEOUT_S = 20.0


@asynccontextmanager
async def session(hub: Hub, token: str) -> AsyncIterator[Client]:
    async with Client(build_mcp(hub, token=token)) as client:
        yield client


async def operator_of(hub: Hub) -> Principal:
    assert hub.operator_token is not None
    return await hub.identity.authenticate(hub.operator_token)


async def subscribed(hub: Hub, topic: str) -> None:
    bus: Any = hub.bus
    await until(lambda: bus.subscriber_count(topic) > 0, f"a wait on {topic}")


async def agent_in(make_agent: MakeAgent, agent_id: str, runtime: str, tmp: Path) -> AgentHandle:
    workspace = tmp / agent_id
    workspace.mkdir()
    return await make_agent(agent_id, runtime={"kind": runtime}, workspace=str(workspace))


async def open_alone(hub: Hub, agent: AgentHandle) -> str:
    """A discussion with no one else whose rounds are over; returns its channel id."""
    channel = await hub.discussions.create_private_channel(
        agent.principal, "solo", [], agent.principal.work_channel_id, "think alone"
    )
    if agent.principal.runtime_kind == "remote":
        # The initiator passes its one turn; the round is silent and the rounds end.
        turn = await hub.turns.next(agent.principal, timeout_s=15)
        assert turn is not None and turn.channel_id == channel.id
        await hub.turns.no_reply(agent.principal, turn.id)
    await hub.tasks.wait_idle()
    return channel.id


async def call_back(hub: Hub, agent: AgentHandle, channel_id: str, tmp: Path) -> str:
    """Finish the discussion with a summary file; returns the summary's resolved path."""
    summary = tmp / agent.id / "summary.md"
    summary.write_text("done")
    await hub.discussions.callback(agent.principal, channel_id, "summary.md")
    return str(summary.resolve())


async def test_wait_for_turn_wakes_when_a_turn_is_offered(
    hub: Hub, make_agent: MakeAgent, tmp_path: Path
) -> None:
    rem = await agent_in(make_agent, "rem", "remote", tmp_path)
    group = await hub.channels.create(
        await operator_of(hub), ChannelSpec(name="g", members=["rem"], discussion_rounds=1)
    )
    async with session(hub, rem.token) as r:
        waiting = asyncio.create_task(r.call_tool("wait_for_turn", {"timeout_s": 120}))
        await subscribed(hub, turns_topic("rem"))
        assert not waiting.done()
        await hub.channels.post(await operator_of(hub), group.id, "your turn")
        turn = data(await within(waiting, "wait_for_turn to wake"))
        assert turn["channel_id"] == group.id
        await r.call_tool("no_reply", {"turn_id": turn["turn_id"]})
    await hub.tasks.wait_idle()


async def test_wait_for_mail_wakes_on_the_notice_of_a_turn(
    hub: Hub, make_agent: MakeAgent, tmp_path: Path
) -> None:
    rem = await agent_in(make_agent, "rem", "remote", tmp_path)
    group = await hub.channels.create(
        await operator_of(hub), ChannelSpec(name="g", members=["rem"], discussion_rounds=1)
    )
    async with session(hub, rem.token) as r:
        waiting = asyncio.create_task(r.call_tool("wait_for_mail", {"timeout_s": 120}))
        await subscribed(hub, inbox_topic("rem"))
        await hub.channels.post(await operator_of(hub), group.id, "your turn")
        mail = data(await within(waiting, "wait_for_mail to wake"))
        [notice] = mail["messages"]
        assert (notice["kind"], notice["from_id"]) == ("notice", "system")
        assert notice["payload"]["channel_id"] == group.id
        turn = data(await r.call_tool("wait_for_turn", {"timeout_s": 0}))
        assert turn["turn_id"] == notice["payload"]["turn_id"]
        await r.call_tool("no_reply", {"turn_id": turn["turn_id"]})
    await hub.tasks.wait_idle()


async def test_the_result_ready_message_wakes_a_remote_initiator_with_a_turn(
    hub: Hub, make_agent: MakeAgent, tmp_path: Path
) -> None:
    ini = await agent_in(make_agent, "ini", "remote", tmp_path)
    discussion = await open_alone(hub, ini)
    async with session(hub, ini.token) as i:
        waiting = asyncio.create_task(i.call_tool("wait_for_turn", {"timeout_s": 120}))
        await subscribed(hub, turns_topic("ini"))
        summary = await call_back(hub, ini, discussion, tmp_path)
        turn = data(await within(waiting, "wait_for_turn to wake"))
        assert turn["channel_id"] == ini.principal.work_channel_id
        assert "[Discussion Result Ready]" in turn["prompt"] and summary in turn["prompt"]
        mail = data(await i.call_tool("check_inbox", {"kind": "notice"}))
        subjects = [m["subject"] for m in mail["messages"]]
        assert f"Your turn in channel {ini.principal.work_channel_id} (round 1)" in subjects
        await i.call_tool("no_reply", {"turn_id": turn["turn_id"]})
    await hub.tasks.wait_idle()


async def test_the_result_ready_message_wakes_an_agent_without_a_runtime_by_mail(
    hub: Hub, make_agent: MakeAgent, tmp_path: Path
) -> None:
    ini = await agent_in(make_agent, "ini", "none", tmp_path)
    discussion = await open_alone(hub, ini)
    async with session(hub, ini.token) as i:
        waiting = asyncio.create_task(i.call_tool("wait_for_mail", {"timeout_s": 120}))
        await subscribed(hub, inbox_topic("ini"))
        summary = await call_back(hub, ini, discussion, tmp_path)
        mail = data(await within(waiting, "wait_for_mail to wake"))
        [notice] = mail["messages"]
        assert notice["payload"]["channel_id"] == ini.principal.work_channel_id
        assert "[Discussion Result Ready]" in notice["body"] and summary in notice["body"]
        # No turn: an agent without a runtime is told, not given a turn to answer.
        assert data(await i.call_tool("wait_for_turn", {"timeout_s": 0})) == {"timed_out": True}


async def test_an_initiator_waiting_on_its_inbox_learns_that_the_rounds_ended(
    hub: Hub, make_agent: MakeAgent, tmp_path: Path
) -> None:
    ini = await agent_in(make_agent, "ini", "remote", tmp_path)
    channel = await hub.discussions.create_private_channel(
        ini.principal, "solo", [], ini.principal.work_channel_id, "think alone"
    )
    async with session(hub, ini.token) as i:
        turn = data(await i.call_tool("wait_for_turn", {"timeout_s": 15}))
        data(await i.call_tool("check_inbox", {}))  # the turn notice, now delivered
        waiting = asyncio.create_task(i.call_tool("wait_for_mail", {"timeout_s": 120}))
        await subscribed(hub, inbox_topic("ini"))
        await i.call_tool("no_reply", {"turn_id": turn["turn_id"]})
        [notice] = data(await within(waiting, "wait_for_mail to wake"))["messages"]
    assert notice["payload"] == {
        "channel_id": channel.id,
        "end_reason": "idle",
        "next": "discuss_callback",
    }
    assert notice["body"].startswith("[Discussion Idle]")
    await hub.tasks.wait_idle()


async def mail_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if event.get("event") == "mail":
                yield json.loads(event["data"])
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            event[name] = value.removeprefix(" ")


async def first_mail(
    response: httpx.Response, matches: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    async with asyncio.timeout(READ_TIMEOUT_S):
        async for msg in mail_events(response):
            if matches(msg):
                return msg
    raise AssertionError("the stream ended before the expected mail")


async def test_the_sse_inbox_stream_shows_turn_and_result_notices(
    hub: Hub, make_agent: MakeAgent, tmp_path: Path
) -> None:
    rem = await agent_in(make_agent, "rem", "remote", tmp_path)
    idle = await agent_in(make_agent, "idle", "none", tmp_path)
    async with serving(create_app(hub=hub)) as base, httpx.AsyncClient(base_url=base) as http:
        rem_headers = {"Authorization": f"Bearer {rem.token}"}
        idle_headers = {"Authorization": f"Bearer {idle.token}"}
        timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
        async with (
            http.stream(
                "GET", "/v1/agents/rem/inbox/stream", headers=rem_headers, timeout=timeout
            ) as rem_stream,
            http.stream(
                "GET", "/v1/agents/idle/inbox/stream", headers=idle_headers, timeout=timeout
            ) as idle_stream,
        ):
            assert rem_stream.status_code == idle_stream.status_code == 200
            await hub.channels.post(
                await operator_of(hub), rem.principal.work_channel_id or "", "wake up, rem"
            )
            turn_notice = await first_mail(rem_stream, lambda m: "turn_id" in m["payload"])
            assert turn_notice["payload"]["channel_id"] == rem.principal.work_channel_id
            await hub.turns.no_reply(rem.principal, turn_notice["payload"]["turn_id"])
            summary = await call_back(hub, idle, await open_alone(hub, idle), tmp_path)
            ready = await first_mail(idle_stream, lambda m: summary in m["body"])
            assert ready["payload"]["channel_id"] == idle.principal.work_channel_id
    await hub.tasks.wait_idle()
