"""In a real Chromium: the usage page shows the totals of turns a fake provider reported (the
real openai SDK against the fake server), by agent and by model, with budgets; the search page
finds mail and channel messages, never what the signed-in principal may not read."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import expect

from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.service.conversations.channels import ChannelSpec
from tests.conftest import MakeAgent
from tests.fakes.openai_server import FakeOpenAIServer
from tests.web.conftest import Browsing, shoot, sign_in


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


async def test_usage_totals_by_agent_and_model_with_a_budget(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, model: FakeOpenAIServer
) -> None:
    hub = ui.hub
    runtime = {
        "kind": "openai",
        "model": "fake-model",
        "base_url": model.base_url,
        "api_key": "k",
        "max_retries": 0,
    }
    alice = await make_agent("alice", runtime=runtime)
    assert alice.principal.work_channel_id is not None
    for text in ("one", "two"):
        await hub.channels.post(operator, alice.principal.work_channel_id, text)
        await hub.tasks.wait_idle()
    await hub.usage.set_budget(operator, "agent", "alice", max_tokens=60, max_cost_usd=None)

    page = await ui.signed_in()
    await page.get_by_role("link", name="Usage").click()
    await expect(page.get_by_role("heading", name="Usage", exact=True)).to_be_visible()
    row = page.locator("#usage tbody tr[data-key='alice']")
    await expect(row.locator("td").nth(1)).to_have_text("2")
    await expect(row.locator("td.tokens")).to_have_text(str(2 * (42 + 7)))
    await expect(page.locator("#usage-total td.tokens")).to_have_text("98")
    await expect(page.locator("#budgets")).to_contain_text("exhausted")
    await page.get_by_label("Group by").select_option("model")
    await page.get_by_role("button", name="Show").click()
    await expect(page.locator("#usage tbody tr[data-key='fake-model'] td").nth(1)).to_have_text("2")
    await shoot(page, ui.screenshots, "usage")

    # An agent sees its own turns only: bob has none.
    bob = await make_agent("bob")
    other = await ui.context.browser.new_context()  # type: ignore[union-attr]
    try:
        bob_page = await other.new_page()
        await sign_in(bob_page, ui.url, bob.token)
        await bob_page.goto(f"{ui.url}/ui/usage")
        await expect(bob_page.locator("#usage tbody")).to_contain_text("No usage recorded.")
        await expect(bob_page.locator("#budgets")).to_have_count(0)
    finally:
        await other.close()


async def test_search_finds_what_the_viewer_may_read(
    ui: Browsing, operator: Principal, make_agent: MakeAgent
) -> None:
    hub = ui.hub
    alice = (await make_agent("alice")).principal
    bob = await make_agent("bob", accepts_channels_from=["alice"])
    await make_agent("carol")
    await hub.mail.send(
        alice, SendRequest(to="bob", kind="task", subject="Parser", body="Quotes break it.")
    )
    await hub.mail.send(
        alice, SendRequest(to="carol", kind="task", subject="Parser too", body="Secret.")
    )
    group = await hub.channels.create(alice, ChannelSpec(name="design", members=["bob"]))
    await hub.channels.post(alice, group.id, "The parser keeps quotes.")
    await hub.tasks.wait_idle()

    page = await ui.signed_in(bob.token)
    await page.get_by_role("link", name="Search").click()
    await page.get_by_label("Words").fill("quotes")
    await page.get_by_role("button", name="Search").click()
    hits = page.locator("#hits li.hit")
    await expect(hits).to_have_count(2)
    await expect(page.locator("#hits")).to_contain_text("Quotes break it.")
    await expect(page.locator("#hits")).to_contain_text("The parser keeps quotes.")
    # carol's mail is never found by bob, whatever he asks.
    await page.get_by_label("Words").fill("secret")
    await page.get_by_role("button", name="Search").click()
    await expect(page.locator("#hits")).to_contain_text("Nothing you may read matches.")
    await expect(hits).to_have_count(0)
    # Filters: only channel messages.
    await page.get_by_label("Words").fill("parser")
    await page.get_by_label("In", exact=True).select_option("channel")
    await page.get_by_role("button", name="Search").click()
    await expect(hits).to_have_count(1)
    await expect(hits.first).to_have_attribute("data-source", "channel")
    await hits.first.get_by_role("link", name="design").click()
    await expect(page).to_have_url(f"{ui.url}/ui/channels/{group.id}")
    await page.goto(f"{ui.url}/ui/search?q=parser")
    await shoot(page, ui.screenshots, "search")
