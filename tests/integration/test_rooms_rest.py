"""Meeting rooms over REST (``/v1/rooms``): refusals with their codes and statuses, a meeting
watched live on its stream while a human speaks into it, and the emergency stop closing it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx

from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import within
from tests.integration.meeting_support import members, room_with
from tests.integration.test_channels import Served, sse_events


async def test_room_refusals_over_rest(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    a = await make_agent("a", runtime={"kind": "none"})
    d = await make_agent("d", runtime={"kind": "none"})
    op = api(hub.operator_token)
    assert (await api(None).get("/v1/rooms")).status_code == 401
    r = await op.post("/v1/rooms", json={"name": "sync"})
    assert r.status_code == 201, r.text
    room = r.json()["id"]
    other = (await op.post("/v1/rooms", json={"name": "other"})).json()["id"]
    as_a, as_d = api(a.token), api(d.token)
    r = await as_d.post(f"/v1/rooms/{room}/members", json={"agent_id": "a"})
    assert (r.status_code, r.json()["code"]) == (403, "room_join_forbidden")
    r = await as_a.post(f"/v1/rooms/{room}/members", json={"agent_id": "a"})
    assert r.status_code == 201 and r.json()["state"] == "idle-waiting"
    r = await as_a.post(f"/v1/rooms/{other}/members", json={"agent_id": "a"})
    assert (r.status_code, r.json()["code"]) == (409, "room_membership_exclusive")
    r = await as_d.post(f"/v1/rooms/{room}/meetings", json={"topic": "t"})
    assert (r.status_code, r.json()["code"]) == (403, "not_a_room_member")
    r = await as_d.get(f"/v1/rooms/{room}")
    assert (r.status_code, r.json()["code"]) == (403, "not_a_room_member")
    r = await op.post(f"/v1/rooms/{room}/meetings", json={"topic": "t", "members": ["d"]})
    assert (r.status_code, r.json()["code"]) == (403, "summon_non_member")
    r = await as_a.post(
        "/v1/rooms", json={"name": "x", "config": {"moderator_runtime": {"kind": "openai"}}}
    )
    assert (r.status_code, r.json()["code"]) == (403, "operator_only")
    assert [x["id"] for x in (await as_a.get("/v1/rooms")).json()] == [room]
    assert len((await op.get("/v1/rooms")).json()) == 2
    r = await as_a.post("/v1/rooms/done", json={"done": True})
    assert r.json()["state"] == "done"
    r = await as_d.get(f"/v1/rooms/{other}/members")
    assert (r.status_code, r.json()["code"]) == (403, "not_a_room_member")


async def test_a_meeting_is_watched_live_interjected_and_stopped_over_rest(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, port: int
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    team["a"].speech_gate = asyncio.Event()  # only the stop ends a's speech
    headers = {"Authorization": f"Bearer {hub.operator_token}"}
    async with (
        Served(hub, port) as served,
        httpx.AsyncClient(base_url=served.url, headers=headers, timeout=10) as client,
    ):
        room = (await client.post("/v1/rooms", json={"name": "sync"})).json()["id"]
        for name in team:
            r = await client.post(f"/v1/rooms/{room}/members", json={"agent_id": name})
            assert r.status_code == 201
        r = await client.post(f"/v1/rooms/{room}/meetings", json={"topic": "costs"})
        assert r.status_code == 201, r.text
        view = r.json()
        assert (view["topic"], view["round"], view["max_rounds"]) == ("costs", 1, 3)
        assert view["present"] == ["a", "b"] and view["status"] == "running"
        meeting = view["id"]
        seen: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def follow() -> None:
            async with client.stream("GET", f"/v1/rooms/meetings/{meeting}/stream") as response:
                assert response.status_code == 200
                async for event in sse_events(response):
                    await seen.put(event)

        reader = asyncio.create_task(follow())
        try:
            await within(team["a"].speech_started.wait(), "a's speech")
            r = await client.post(
                f"/v1/rooms/meetings/{meeting}/messages", json={"content": "HUMAN says hi"}
            )
            assert r.status_code == 201
            # This meeting's own stop; the emergency stop (/v1/rooms/stop) would end them all.
            r = await client.post(f"/v1/rooms/meetings/{meeting}/stop")
            assert r.status_code == 200
            assert (r.json()["id"], r.json()["end_reason"]) == (meeting, "stopped")
            contents: list[str] = []
            while True:
                event = await within(seen.get(), "the meeting's end on its stream")
                if event["event"] == "message":
                    contents.append(event["data"]["content"])
                if event["event"] == "meeting" and event["data"]["status"] == "ended":
                    assert event["data"]["end_reason"] == "stopped"
                    break
            assert "HUMAN says hi" in contents
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        r = await client.get(f"/v1/rooms/meetings/{meeting}")
        assert (r.json()["status"], r.json()["end_reason"]) == ("ended", "stopped")
        r = await client.post(f"/v1/rooms/meetings/{meeting}/stop")
        assert (r.status_code, r.json()["code"]) == (409, "meeting_ended")
        states = {
            m["agent_id"]: m["state"]
            for m in (await client.get(f"/v1/rooms/{room}/members")).json()
        }
        assert states == {"a": "idle-waiting", "b": "idle-waiting"}


async def test_a_long_transcript_comes_a_page_at_a_time(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    team = await members(make_agent, runtimes, ["a"])
    team["a"].speech_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a"])
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    for n in range(4):
        await hub.meetings.post(operator, meeting.id, f"post {n}")
    op = api(hub.operator_token)
    path = f"/v1/rooms/meetings/{meeting.id}/transcript"
    seen: list[int] = []
    url: str | None = f"{path}?limit=2"
    while url is not None:
        r = await op.get(url)
        assert r.status_code == 200, r.text
        seen += [m["seq"] for m in r.json()]
        url = r.links.get("next", {}).get("url")
    assert seen == [1, 2, 3, 4, 5]
    r = await op.get(path, params={"latest": 2})
    assert ([m["content"] for m in r.json()], r.links) == (["post 2", "post 3"], {})
    r = await op.get(path, params={"after_seq": 4})
    assert [m["content"] for m in r.json()] == ["post 3"]
    await hub.meetings.stop(operator)
    team["a"].speech_gate.set()
