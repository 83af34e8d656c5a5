"""In a real Chromium: a task's turns on the trace page's time axis, with the durations the hub
recorded (a turn against the fake OpenAI server that calls a tool), and a turn's prompt and
response opened from it, secrets redacted; an agent opens only its own turns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import expect

from parley.core.clock import SystemClock
from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.meetings.meetings import ConveneSpec
from parley.testing import StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent
from tests.fakes.model_server import FakeCall, FakeReply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.meeting_support import members, room_with
from tests.web.conftest import Browsing, shoot, sign_in


@pytest.fixture
def clock() -> SystemClock:
    """The real clock: the durations shown are the ones the hub measured."""
    return SystemClock()


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


async def _openai_agent(
    make_agent: MakeAgent, name: str, model: FakeOpenAIServer, tmp_path: Path
) -> AgentHandle:
    return await make_agent(
        name,
        workspace=str(tmp_path / f"ws-{name}"),
        runtime={
            "kind": "openai",
            "model": "fake-model",
            "base_url": model.base_url,
            "api_key": "test-key",
            "max_retries": 0,
        },
    )


async def test_the_trace_shows_each_turn_on_a_time_axis_and_opens_its_prompt_and_response(
    ui: Browsing,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeOpenAIServer,
    tmp_path: Path,
) -> None:
    hub = ui.hub
    alice = await _openai_agent(make_agent, "alice", model, tmp_path)
    bob = await make_agent("bob", runtime={"kind": "none"})
    model.script(
        FakeReply(
            text="",
            calls=[FakeCall("send_message", {"to": "bob", "kind": "notice", "subject": "hi"})],
        ),
        FakeReply(text="Told bob; the password=hunter2xyz stays with me."),
    )
    work = alice.principal.work_channel_id
    assert work is not None
    posted = await hub.channels.post(operator, work, "Tell bob hello. password=hunter2xyz")
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    [turn] = await hub.tasks.invocations(operator, posted.task_id)
    assert turn.timings["tool_calls_ms"] > 0  # the hub timed the model's tool call

    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/tasks/{posted.task_id}/trace")
    bars = page.locator("#timeline li.turn")
    await expect(bars).to_have_count(1)
    bar = bars.first
    await expect(bar).to_contain_text("alice")
    whole = ("queue_ms", "prompt_build_ms", "provider_wait_ms", "persist_ms")
    await expect(bar.locator(".took")).to_have_text(f"{sum(turn.timings[k] for k in whole):.1f} ms")
    for part, key in (
        ("provider wait", None),
        ("tool calls", "tool_calls_ms"),
        ("commit", "persist_ms"),
    ):
        text = bar.locator(".parts")
        await expect(text).to_contain_text(part)
        if key is not None:
            await expect(text).to_contain_text(f"{part} {turn.timings[key]:.1f} ms")
    # Drawn on the axis: one rectangle per timed part, the provider wait among them.
    await expect(bar.locator("svg rect.provider")).to_have_count(1)
    await expect(bar.locator("svg rect.tools")).to_have_count(1)
    await shoot(page, ui.screenshots, "timeline")

    await bar.get_by_role("link", name="Prompt and response of alice, round 1").click()
    await expect(page.get_by_role("heading", name="Turn of alice")).to_be_visible()
    prompt, response = page.locator("#prompt"), page.locator("#response")
    await expect(prompt).to_contain_text("Tell bob hello. password=***")
    await expect(response).to_contain_text("Told bob; the password=*** stays with me.")
    await expect(page.locator("main")).not_to_contain_text("hunter2xyz")

    # An agent opens its own turns; another agent reads nothing of them.
    turn_url = f"{ui.url}/ui/tasks/{posted.task_id}/turns/{turn.id}"
    for token, opens in ((alice.token, True), (bob.token, False)):
        context = await ui.context.browser.new_context()  # type: ignore[union-attr]
        as_agent = await context.new_page()
        await sign_in(as_agent, ui.url, token)
        await as_agent.goto(turn_url)
        main = as_agent.locator("main")
        if opens:
            await expect(main.locator("#response")).to_contain_text("password=***")
        else:
            await expect(main).to_contain_text("Refused")
        await expect(main).not_to_contain_text("hunter2xyz")
        await context.close()


async def test_an_agent_in_the_channel_is_refused_another_agents_turn(
    ui: Browsing,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeOpenAIServer,
    tmp_path: Path,
) -> None:
    hub = ui.hub
    await _openai_agent(make_agent, "alice", model, tmp_path)
    bob = await make_agent("bob", runtime={"kind": "none"})
    model.script(FakeReply(text="alice: my view"), FakeReply(text="alice: still my view"))
    crew = await hub.channels.create(operator, ChannelSpec(name="crew", members=["alice", "bob"]))
    posted = await hub.channels.post(operator, crew.id, "What do you think?")
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    turns = await hub.tasks.invocations(operator, posted.task_id)
    turn = next(t for t in turns if t.agent_id == "alice")

    page = await ui.context.new_page()
    await sign_in(page, ui.url, bob.token)
    # bob reads the channel, and so the trace, but not what alice's turn was given and said.
    await page.goto(f"{ui.url}/ui/tasks/{posted.task_id}/trace")
    await expect(page.locator("#timeline li.turn", has_text="alice").first).to_be_visible()
    await expect(
        page.get_by_role("link", name="Prompt and response of alice, round 1")
    ).to_have_count(0)
    await page.goto(f"{ui.url}/ui/tasks/{posted.task_id}/turns/{turn.id}")
    await expect(page.locator("main")).to_contain_text("Refused (forbidden)")
    await expect(page.locator("main")).to_contain_text("only its own turns")


async def test_a_meetings_speeches_on_its_time_axis(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub = ui.hub
    await members(make_agent, runtimes, ["ada", "bob"])
    room = await room_with(hub, operator, ["ada", "bob"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="Release plan"))
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    speeches = await hub.meetings.speeches(operator, meeting.id)
    assert {s.agent_id for s in speeches} == {"ada", "bob"}
    assert all(s.timings and "provider_wait_ms" in s.timings for s in speeches)

    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/meetings/{meeting.id}")
    await page.get_by_role("link", name="Turn timeline of this meeting").click()
    bars = page.locator("#timeline li.turn")
    await expect(bars).to_have_count(len(speeches))
    for speech in speeches:
        assert speech.timings is not None
        bar = bars.filter(has_text=speech.agent_id)
        wait = speech.timings["provider_wait_ms"]
        await expect(bar.locator(".parts")).to_contain_text(f"provider wait {wait:.1f} ms")
        await expect(bar.locator("svg rect.provider")).to_have_count(1)
