"""In a real Chromium: sign in, watch a discussion run live and end with its reason, post as a
human and see the running discussion superseded."""

from __future__ import annotations

from playwright.async_api import expect

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import Gate, within
from tests.web.conftest import Browsing, shoot


async def test_watch_a_discussion_live_then_supersede_it(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    gate = Gate()

    async def alpha(turn: Turn) -> str:
        await gate.wait()
        return f"alpha: proposal for round {turn.round}"

    runtimes.set("alpha", ScriptedRuntime(alpha))
    runtimes.set("beta", ScriptedRuntime(lambda turn: f"beta: question in round {turn.round}"))
    await make_agent("alpha", runtime={"kind": "scripted"})
    await make_agent("beta", runtime={"kind": "scripted"})
    hub = ui.hub
    await hub.channels.create(
        operator, ChannelSpec(name="queue-design", members=["alpha", "beta"], discussion_rounds=2)
    )
    page = await ui.signed_in()
    await expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    await page.get_by_role("link", name="Channels").click()
    await page.get_by_role("link", name="queue-design").click()
    await expect(page.locator("#tasks")).to_contain_text("No task has run")

    # Post as a human through the page's form: the discussion starts and shows live.
    await page.get_by_label("Post as operator").fill("U1: design the job queue")
    await page.get_by_role("button", name="Post", exact=True).click()
    await within(gate.entered.wait(), "alpha's first call")
    transcript = page.locator("#transcript")
    await expect(transcript).to_contain_text("U1: design the job queue")
    first = page.locator("#tasks .task").first
    await expect(first).to_contain_text("running · round 1/2")
    await expect(first.get_by_role("button", name="Cancel task")).to_be_visible()

    # Let it run: every reply arrives over the stream, and the end reason is shown as such.
    gate.release.set()
    await expect(transcript).to_contain_text("beta: question in round 2")
    await expect(first).to_have_attribute("data-end-reason", "max_rounds")
    await expect(first).to_contain_text("ended: max_rounds")
    await expect(first).not_to_contain_text("concluded")
    await expect(transcript.locator("li.msg.human")).to_have_count(1)
    await expect(transcript.locator("li.msg.agent")).to_have_count(4)
    # Another page of this browser opens the shared stream again: this one keeps one of each
    # message, and what it shows goes on updating.
    other = await ui.context.new_page()
    await other.goto(page.url)
    await expect(other.locator("#transcript li.msg")).to_have_count(5)
    await other.close()
    await expect(transcript.locator("li.msg")).to_have_count(5)
    await shoot(page, ui.screenshots, "channel", dark=True)

    # A newer human message supersedes a running discussion.
    gate.entered.clear()
    gate.release.clear()
    await page.get_by_label("Post as operator").fill("U2: first design the retry policy")
    await page.get_by_role("button", name="Post", exact=True).click()
    await within(gate.entered.wait(), "alpha's call in the second discussion")
    second = page.locator("#tasks .task").first
    await expect(second).to_contain_text("running · round 1/2")
    await page.get_by_label("Post as operator").fill("U3: no, the cache")
    await page.get_by_role("button", name="Post", exact=True).click()
    superseded = page.locator("#tasks .task").nth(1)
    await expect(superseded).to_have_attribute("data-end-reason", "superseded")
    await expect(superseded).to_contain_text("ended: superseded by a newer message")
    await expect(page.locator("#tasks .task").first).to_have_attribute("data-status", "running")
    gate.release.set()
    await expect(page.locator("#tasks .task").first).to_have_attribute(
        "data-end-reason", "max_rounds"
    )

    # The invocation trace of the superseded task names the rejected reply and its reason.
    await superseded.get_by_role("link", name="Invocation trace").click()
    await expect(page.locator("table.list")).to_contain_text("rejected")
    await expect(page.locator("table.list")).to_contain_text("new_message")
