"""In a real Chromium: a page whose live stream the hub refuses (its session holds as many live
pages as it may) shows what it loaded and says it is not live, and goes live by itself once
another live page of the session is closed."""

from __future__ import annotations

import pytest
from playwright.async_api import BrowserContext, expect

from parley.config import Settings
from tests.web.conftest import Served, sign_in, went_live

# The page waits out htmx's growing delay between attempts: a failure guard, not a timing.
RECONNECT_WAIT_MS = 30_000


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Two: a page's own stream and the navigation's badge, which every page of the browser
    # shares (one stream for all of them).
    return settings.model_copy(update={"ui_live_streams_per_session": 2})


async def test_a_page_over_the_live_stream_bound_is_shown_not_live_and_recovers(
    served: Served, context: BrowserContext
) -> None:
    hub = served.hub
    assert hub.operator_token is not None
    live_page = await context.new_page()
    await sign_in(live_page, served.url, hub.operator_token)
    await went_live(live_page)
    # A second live page of the same session: its stream is refused (the first keeps its own).
    other = await context.new_page()
    await other.goto(f"{served.url}/ui/channels")
    await expect(other.locator("main [sse-connect]")).to_have_attribute("data-live", "not-live")
    await expect(live_page.locator("main [sse-connect]")).to_have_attribute("data-live", "open")
    await expect(other.get_by_role("heading", name="Channels")).to_be_visible()
    note = other.get_by_role("status").filter(has_text="Not live")
    await expect(note).to_be_visible()
    # Once the first page is gone, the second goes live by itself.
    await live_page.close()
    await expect(note).to_have_count(0, timeout=RECONNECT_WAIT_MS)
