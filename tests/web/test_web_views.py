"""In a real Chromium: the overview, the inbox with its filters and thread view, and the event
log, each live; the screenshots of the main views for the docs."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import BrowserContext, expect

from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.service.conversations.channels import ChannelSpec
from parley.service.meetings.rooms import RoomSpec
from tests.conftest import MakeAgent
from tests.web.conftest import Served, shoot, sign_in, went_live


async def test_overview_mail_and_events_update_live(
    served: Served,
    context: BrowserContext,
    screenshots: Path,
    operator: Principal,
    make_agent: MakeAgent,
) -> None:
    hub = served.hub
    alpha = await make_agent("alpha", runtime={"kind": "none"})
    await make_agent("beta", runtime={"kind": "none"})
    await hub.channels.create(operator, ChannelSpec(name="design", members=["alpha", "beta"]))
    await hub.rooms.create(operator, RoomSpec(name="sync"))
    page = await context.new_page()
    assert hub.operator_token is not None
    await sign_in(page, served.url, hub.operator_token)

    # The overview's inbox summary (M8) follows new mail without a reload.
    row = page.locator("#agents-h + table tr", has_text="beta")
    await expect(row).to_contain_text("none")
    await expect(row.locator("td").nth(3)).to_have_text("0")
    await hub.mail.send(alpha.principal, SendRequest(to="beta", kind="task", subject="Q1"))
    await expect(row.locator("td").nth(3)).to_have_text("1")
    await shoot(page, screenshots, "overview")

    # beta's inbox, live, filtered by kind; the thread view.
    await page.goto(f"{served.url}/ui/mail?owner=beta")
    inbox = page.locator("#inbox")
    await expect(inbox).to_contain_text("Q1")
    await hub.mail.send(alpha.principal, SendRequest(to="beta", kind="notice", subject="FYI"))
    await expect(inbox).to_contain_text("FYI")
    await page.get_by_label("Kind").fill("notice")
    await page.get_by_role("button", name="Filter").click()
    await expect(inbox).to_contain_text("FYI")
    await expect(inbox).not_to_contain_text("Q1")
    await shoot(page, screenshots, "mail")
    await page.get_by_role("link", name="FYI").click()
    await expect(page.get_by_role("heading", name="Thread")).to_be_visible()
    await expect(page.locator("main")).to_contain_text("alpha")

    # The event log, live and filtered by a type prefix.
    await page.goto(f"{served.url}/ui/events?type=mail.")
    events = page.locator("#events")
    await expect(events.locator("tbody tr")).to_have_count(2)
    await hub.mail.send(alpha.principal, SendRequest(to="beta", kind="notice", subject="more"))
    await expect(events.locator("tbody tr")).to_have_count(3)
    await expect(events).not_to_contain_text("channel.created")
    await shoot(page, screenshots, "events")

    await page.goto(f"{served.url}/ui/channels")
    await went_live(page)
    await expect(page.locator("#channels")).to_contain_text("design")
    await hub.channels.create(operator, ChannelSpec(name="retro", members=["alpha"]))
    await expect(page.locator("#channels")).to_contain_text("retro")
    await shoot(page, screenshots, "channels")


async def test_pages_work_from_the_keyboard(
    served: Served, context: BrowserContext, operator: Principal
) -> None:
    """Sign in and reach a view with the keyboard alone: real links, buttons and forms."""
    page = await context.new_page()
    await page.goto(f"{served.url}/ui/signin")
    assert served.hub.operator_token is not None
    # The token field has focus. Chromium applies autofocus at a rendering update, which may
    # come after the load event: typing before it would lose the first characters.
    await expect(page.locator("#token")).to_be_focused()
    await page.keyboard.type(served.hub.operator_token)
    await page.keyboard.press("Enter")
    await page.wait_for_url(f"{served.url}/ui/")
    await page.keyboard.press("Tab")  # the skip link
    await page.keyboard.press("Tab")  # the brand
    await page.keyboard.press("Tab")  # Overview
    await page.keyboard.press("Tab")  # Channels
    focused = await page.evaluate("document.activeElement.textContent")
    assert focused == "Channels"
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Channels")).to_be_visible()
