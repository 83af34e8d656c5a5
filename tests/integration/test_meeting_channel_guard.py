"""A meeting's channel is written only by its meeting (R4–R8): every generic channel route and
tool refuses it with ``meeting_channel``, during the meeting and after it, while the meeting's
own writes (speeches, a human's interjection through the meeting, notes, minutes) go on."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from parley.core.errors import Conflict
from parley.core.identity import Principal
from parley.core.rooms import Meeting
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.tools.channels import create_private_channel, post
from parley.service.tools.invitations import invite_to_channel
from parley.service.tools.registry import ToolCall
from parley.surfaces.rest.app import create_app
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import within
from tests.integration.meeting_support import Member, members, room_with

BASE = "http://parley.test"


def refused(r: httpx.Response) -> tuple[int, str | None]:
    return r.status_code, r.json().get("code")


async def running_meeting(
    hub: Hub, operator: Principal, team: dict[str, Member]
) -> tuple[Meeting, asyncio.Event]:
    """A meeting convened by ``a``, held in its first speech until the returned gate is set."""
    gate = asyncio.Event()
    for member in team.values():
        member.speech_gate = gate
    room = await room_with(hub, operator, list(team), max_rounds=1)
    a = await hub.identity.require("a")
    meeting = await hub.meetings.convene(a, room.id, ConveneSpec(topic="costs"))
    spoke = [asyncio.ensure_future(m.speech_started.wait()) for m in team.values()]
    await within(asyncio.wait(spoke, return_when=asyncio.FIRST_COMPLETED), "a first speech")
    for waiting in spoke:
        waiting.cancel()
    return meeting, gate


async def generic_writes(
    hub: Hub, api: Any, tokens: dict[str, str], channel_id: str
) -> dict[str, tuple[int, str | None]]:
    """Each generic write of the meeting's channel, as an attendee, the convener or the
    operator may try it, and what it answered."""
    as_a, as_b, op = api(tokens["a"]), api(tokens["b"]), api(hub.operator_token)
    path = f"/v1/channels/{channel_id}"
    return {
        "attendee post": refused(await as_b.post(f"{path}/messages", json={"content": "hi"})),
        "attendee group post": refused(
            await as_b.post(f"/v1/im/sessions/{channel_id}/messages", json={"content": "hi"})
        ),
        "operator post": refused(await op.post(f"{path}/messages", json={"content": "hi"})),
        "convener rounds": refused(await as_a.patch(path, json={"discussion_rounds": 5})),
        "convener members": refused(await as_a.patch(path, json={"members": ["a"]})),
        "group patch": refused(
            await as_a.patch(f"/v1/im/sessions/{channel_id}", json={"members": ["a"]})
        ),
        "convener delete": refused(await as_a.delete(path)),
        "operator delete": refused(await op.delete(path)),
        "invitation": refused(await as_a.post(f"{path}/invitations", json={"agent_id": "c"})),
        "callback": refused(await as_a.post(f"{path}/callback", json={"summaryPath": "s.md"})),
        "force close": refused(await op.post(f"{path}/close", json={"reason": "enough"})),
        "discussion reporting back here": refused(
            await as_a.post(
                "/v1/channels/private",
                json={
                    "name": "side",
                    "members": [],
                    "callbackChannelId": channel_id,
                    "discussGuide": "g",
                },
            )
        ),
    }


async def tool_refusals(hub: Hub, channel_id: str) -> list[str]:
    """What the MCP channel tools answer an attendee about the meeting's channel."""
    call = ToolCall(hub, await hub.identity.require("b"))
    codes = []
    for tool, arguments in (
        (post, {"channel_id": channel_id, "content": "out of turn"}),
        (invite_to_channel, {"channel_id": channel_id, "agent_id": "c"}),
        (
            create_private_channel,
            {"name": "x", "members": [], "callbackChannelId": channel_id, "discussGuide": "g"},
        ),
    ):
        with pytest.raises(Conflict) as caught:
            await tool.run(call, arguments)
        codes.append(caught.value.code)
    return codes


async def test_every_generic_channel_write_refuses_a_meeting_channel_during_and_after_it(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    await make_agent("c", runtime={"kind": "none"})
    tokens = {name: await hub.identity.issue_token(operator, name, rotate=False) for name in team}
    meeting, gate = await running_meeting(hub, operator, team)
    channel_id = meeting.channel_id
    before = await hub.channels.messages(operator, channel_id)

    during = await generic_writes(hub, api, tokens, channel_id)
    assert during == dict.fromkeys(during, (409, "meeting_channel")), during
    assert await tool_refusals(hub, channel_id) == ["meeting_channel"] * 3
    # Nothing was written, no turn started outside the moderator, the channel is unchanged.
    assert await hub.channels.messages(operator, channel_id) == before
    assert await hub.tasks.of_channel(operator, channel_id) == []
    channel = await hub.channels.get(operator, channel_id)
    assert (channel.members, channel.discussion_rounds, channel.status) == (
        ["a", "b"],
        1,
        "active",
    )
    # The meeting's own route still takes a human's interjection, and says where to go.
    r = await api(hub.operator_token).post(
        f"/v1/rooms/meetings/{meeting.id}/messages", json={"content": "one more thing"}
    )
    assert r.status_code == 201, r.text
    r = await api(tokens["b"]).post(f"/v1/channels/{channel_id}/messages", json={"content": "x"})
    assert f"/v1/rooms/meetings/{meeting.id}/messages" in r.json()["message"]

    gate.set()
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    ended = await hub.meetings.get(operator, meeting.id)
    assert ended.status == "ended" and ended.end_reason == "round_cap"
    transcript = [m.sender_kind for m in await hub.channels.messages(operator, channel_id)]
    assert transcript.count("agent") >= 1 and "human" in transcript

    after = await generic_writes(hub, api, tokens, channel_id)
    assert after == dict.fromkeys(after, (409, "meeting_channel")), after
    assert await hub.tasks.of_channel(operator, channel_id) == []


async def test_the_web_ui_refuses_a_post_into_a_meeting_channel(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    meeting, gate = await running_meeting(hub, operator, team)
    before = await hub.channels.messages(operator, meeting.channel_id)
    app = create_app(hub=hub)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as ui:
        r = await ui.post(
            "/ui/signin", data={"token": hub.operator_token}, headers={"Origin": BASE}
        )
        assert r.status_code == 303
        found = re.search(r'name="csrf" value="([^"]+)"', (await ui.get("/ui/")).text)
        assert found is not None
        r = await ui.post(
            f"/ui/channels/{meeting.channel_id}/post",
            data={"csrf": found.group(1), "content": "out of the meeting's way"},
            headers={"Origin": BASE},
        )
        shown = (await ui.get(r.headers["location"])).text if r.status_code == 303 else r.text
    assert "meeting_channel" in shown
    assert await hub.channels.messages(operator, meeting.channel_id) == before
    gate.set()
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
