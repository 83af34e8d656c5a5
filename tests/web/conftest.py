"""Fixtures of the browser tests: the hub (in-process, scripted runtimes) served by uvicorn on a
free port, and Debian's Chromium driven by Playwright (browsers are never downloaded)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from tests.fakes.serving import LocalServer

CHROMIUM = os.environ.get("PARLEY_TEST_CHROMIUM", "/usr/bin/chromium")
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
# The docs' screenshots are rewritten only when asked (PARLEY_UI_SCREENSHOTS=1): an ordinary
# test run takes them into its own temporary directory and leaves the worktree clean.
WRITE_DOCS_IMAGES = os.environ.get("PARLEY_UI_SCREENSHOTS") == "1"
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
WAIT_MS = 10_000
"""How long an expectation waits for the page to change: a failure guard, not a timing."""


@dataclass
class Served:
    url: str
    hub: Hub
    app: FastAPI


@pytest.fixture
async def served(hub: Hub) -> AsyncIterator[Served]:
    app = create_app(hub=hub)
    async with LocalServer(app) as server:
        yield Served(server.url, hub, app)


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    return DOCS_IMAGES if WRITE_DOCS_IMAGES else tmp_path / "images"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)")
    async with async_playwright() as pw:
        the_browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield the_browser
        finally:
            await the_browser.close()


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    ctx = await browser.new_context(viewport=DESKTOP)
    ctx.set_default_timeout(WAIT_MS)
    # Whatever the page does must stay within the UI's Content-Security-Policy.
    violations: list[str] = []

    def watch(page: Page) -> None:
        page.on(
            "console",
            lambda m: (
                violations.append(m.text + str(m.location))
                if "Content Security Policy" in m.text
                else None
            ),
        )

    ctx.on("page", watch)
    try:
        yield ctx
    finally:
        await ctx.close()
    assert violations == []


@dataclass
class Browsing:
    """The served hub, a browser context to open pages in, and where screenshots go."""

    served: Served
    context: BrowserContext
    screenshots: Path

    @property
    def hub(self) -> Hub:
        return self.served.hub

    @property
    def url(self) -> str:
        return self.served.url

    async def signed_in(self, token: str | None = None) -> Page:
        """A new page signed in with ``token`` (the operator's when None)."""
        token = token if token is not None else self.hub.operator_token
        assert token is not None
        page = await self.context.new_page()
        await sign_in(page, self.url, token)
        return page


@pytest.fixture
def ui(served: Served, context: BrowserContext, screenshots: Path) -> Browsing:
    return Browsing(served, context, screenshots)


async def sign_in(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/ui/")
    await page.get_by_label("Token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{url}/ui/")


async def went_live(page: Page) -> None:
    """Until every live part of the page has its stream open (over the browser's one shared
    stream)."""
    await expect(page.locator("[sse-connect]:not([data-live=open])")).to_have_count(0)
    await expect(page.locator("[sse-connect][data-live=open]").first).to_be_attached()


async def shoot(page: Page, where: Path, name: str, *, dark: bool = False) -> None:
    """A screenshot for the docs, at desktop and phone widths (docs/images, committed), and
    with ``dark`` one more on the desktop in the dark colour scheme."""
    where.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    await page.set_viewport_size(DESKTOP)
    await page.screenshot(path=where / f"ui-{name}-desktop.png", full_page=False)
    await page.set_viewport_size(PHONE)
    await page.screenshot(path=where / f"ui-{name}-phone.png", full_page=False)
    if dark:
        await page.set_viewport_size(DESKTOP)
        await page.emulate_media(color_scheme="dark")
        await page.screenshot(path=where / f"ui-{name}-dark.png", full_page=False)
        await page.emulate_media(color_scheme="light")
    if size is not None:
        await page.set_viewport_size(size)
