"""In a real Chromium: the session cookie's flags, a forged cross-site form refused, and a
rotated token or a sign-out ending the session and its live streams."""

from __future__ import annotations

from playwright.async_api import BrowserContext, expect

from parley.core.identity import Principal
from parley.service.identity import HumanSpec
from tests.conftest import MakeAgent
from tests.fakes.serving import LocalServer
from tests.web.conftest import Served, sign_in, went_live


async def test_cookie_flags_and_a_forged_cross_site_form(
    served: Served, context: BrowserContext, operator: Principal, make_agent: MakeAgent
) -> None:
    hub = served.hub
    agent = await make_agent("alpha", runtime={"kind": "none"})
    page = await context.new_page()
    assert hub.operator_token is not None
    await sign_in(page, served.url, hub.operator_token)
    [cookie] = await context.cookies()
    assert cookie["name"] == "parley_session"
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    assert cookie["secure"] is False  # plain http here; the https test is in integration
    assert hub.operator_token not in cookie["value"]
    # Scripts cannot read it.
    assert "parley_session" not in await page.evaluate("document.cookie")

    # Another site (another origin) posts a form at the hub in the signed-in browser.
    channel = agent.principal.work_channel_id
    forged = (
        f'<form id="f" method="post" action="{served.url}/ui/channels/{channel}/post">'
        '<input name="content" value="forged"><input name="csrf" value="guess"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )

    async def evil(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        body = forged.encode()
        await send(  # type: ignore[operator]
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/html")],
            }
        )
        await send({"type": "http.response.body", "body": body})  # type: ignore[operator]

    async with LocalServer(evil) as other:
        other_url = other.url.replace("127.0.0.1", "localhost")  # another site, not just port
        await page.goto(other_url)
        await page.wait_for_url(f"{served.url}/ui/**")
        # SameSite=Strict: the cross-site post carries no cookie, so it is sent to sign in.
        await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    messages = await hub.channels.messages(operator, channel)
    assert [m.content for m in messages] == []


async def test_a_rotated_token_ends_the_session_and_its_live_stream(
    served: Served, context: BrowserContext, operator: Principal
) -> None:
    hub = served.hub
    human = await hub.identity.create_human(operator, HumanSpec(id="hana"))
    page = await context.new_page()
    # Signed in once the overview's live stream has answered.
    await sign_in(page, served.url, human.token)
    await went_live(page)
    await hub.identity.issue_token(operator, "hana", rotate=True)
    # The open stream tells the page at once; the next request finds the session gone.
    await expect(page.get_by_role("alert")).to_contain_text("Your session ended")
    await page.get_by_role("link", name="Sign in again").click()
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.goto(f"{served.url}/ui/")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


async def test_signing_out_ends_the_live_pages_of_that_session_at_once(
    served: Served, context: BrowserContext, operator: Principal
) -> None:
    hub = served.hub
    human = await hub.identity.create_human(operator, HumanSpec(id="hana"))
    watching = await context.new_page()
    await sign_in(watching, served.url, human.token)
    await went_live(watching)
    # Another tab of the same browser (the same session) signs out.
    leaving = await context.new_page()
    await leaving.goto(f"{served.url}/ui/channels")
    await leaving.get_by_role("button", name="Sign out").click()
    await expect(leaving.get_by_role("heading", name="Sign in")).to_be_visible()
    # The open page learns at once, without a request of its own.
    await expect(watching.get_by_role("alert")).to_contain_text("You signed out")
