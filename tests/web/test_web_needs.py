"""In a real Chromium: what needs a person raises the navigation's badge live, lists on the
overview, and (once allowed through the button) a browser notification; a human sees what needs
them, the operator everything."""

from __future__ import annotations

from playwright.async_api import expect

from parley.core.identity import Principal
from parley.core.mail import InboxFilter, SendRequest
from parley.core.ports import Tx
from parley.service.identity import HumanSpec
from parley.service.workers.records import ResultSpec, SpawnSpec, StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.test_workers import scripted
from tests.web.conftest import Browsing, shoot, sign_in, went_live

# Records each notification instead of showing it (the page's own Notification is replaced
# before its scripts run; permission is what the test granted).
RECORD_NOTIFICATIONS = """
window.__shown = [];
const Real = window.Notification;
class Recorded {
  constructor(title, options) { window.__shown.push([title, options && options.body]); }
  static get permission() { return Real.permission; }
  static requestPermission() { return Real.requestPermission(); }
}
window.Notification = Recorded;
"""


async def test_a_blocker_raises_the_badge_live_and_a_notification_once_allowed(
    ui: Browsing, operator: Principal, make_agent: MakeAgent
) -> None:
    hub = ui.hub
    alpha = await make_agent("alpha", runtime={"kind": "none"})
    hana = await hub.identity.create_human(operator, HumanSpec(id="hana"))
    ines = await hub.identity.create_human(operator, HumanSpec(id="ines"))
    await ui.context.add_init_script(RECORD_NOTIFICATIONS)

    page = await ui.signed_in()
    await went_live(page)
    badge = page.locator("#needs .badge")
    await expect(badge).to_have_text("0")
    await expect(page.locator("#needs-list")).to_contain_text("Nothing needs you")
    # Asked for by a button, never on load.
    ask = page.get_by_role("button", name="Allow notifications")
    await expect(ask).to_be_visible()
    await ui.context.grant_permissions(["notifications"])
    await ask.click()
    await expect(ask).to_be_hidden()

    # A blocker mailed to hana reaches the operator too (M4): both badges rise, live.
    other = await ui.context.new_page()
    await other.goto(f"{ui.url}/ui/channels")
    await went_live(other)
    await hub.mail.send(
        alpha.principal, SendRequest(to="hana", kind="blocker", subject="need a key")
    )
    await expect(badge).to_have_text("1")
    await expect(page.locator("#needs")).to_have_class("needs some")
    await expect(other.locator("#needs .badge")).to_have_text("1")
    listed = page.locator("#needs-list li")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text("blocker")
    await expect(listed).to_contain_text("alpha: need a key")
    await shoot(page, ui.screenshots, "needs")
    # Both tabs drew the badge (each handles the event before its badge shows it): one
    # notification in all, whichever tab raised it.
    shown = await page.evaluate("window.__shown") + await other.evaluate("window.__shown")
    assert shown == [["parley: needs you", "blocker: alpha: need a key"]]

    # Read, it needs nobody any more: the badge falls, live.
    copy = (await hub.mail.inbox(operator, operator.id, InboxFilter(kind="blocker")))[0]
    await hub.mail.update_status(operator, copy.id, "read")
    await expect(badge).to_have_text("0")
    await expect(page.locator("#needs-list")).to_contain_text("Nothing needs you")

    # hana sees the blocker mailed to her; ines, another human, does not.
    as_hana = await ui.context.browser.new_context()  # type: ignore[union-attr]
    hana_page = await as_hana.new_page()
    await sign_in(hana_page, ui.url, hana.token)
    await expect(hana_page.locator("#needs-list")).to_contain_text("alpha: need a key")
    await expect(hana_page.locator("#needs .badge")).to_have_text("1")
    as_ines = await ui.context.browser.new_context()  # type: ignore[union-attr]
    ines_page = await as_ines.new_page()
    await sign_in(ines_page, ui.url, ines.token)
    await went_live(ines_page)
    await expect(ines_page.locator("#needs .badge")).to_have_text("0")
    await expect(ines_page.locator("#needs-list")).to_contain_text("Nothing needs you")
    await as_hana.close()
    await as_ines.close()


async def test_an_interrupted_worker_needs_the_operator_not_another_human(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub = ui.hub
    await scripted(make_agent, runtimes, "coder")
    hana = await hub.identity.create_human(operator, HumanSpec(id="hana"))
    page = await ui.signed_in()
    await went_live(page)
    await expect(page.locator("#needs .badge")).to_have_text("0")

    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="fix the build"))
    await hub.tasks.wait_idle()

    async def interrupt(tx: Tx) -> None:
        # What the hub does to an idle orphan: it waits for a person to review and resume it.
        row = await tx.get("workers", worker.id)
        await hub.workers.move(tx, row, "interrupted", actor="system", reason="orphaned")

    await hub.store.write(interrupt)
    listed = page.locator("#needs-list li")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text("worker waits for a resume")
    await expect(page.locator("#needs .badge")).to_have_text("1")
    await listed.get_by_role("link", name="coder").click()
    await expect(page.locator("#worker-state")).to_have_text("interrupted")

    as_hana = await ui.context.browser.new_context()  # type: ignore[union-attr]
    hana_page = await as_hana.new_page()
    await sign_in(hana_page, ui.url, hana.token)
    await went_live(hana_page)
    await expect(hana_page.locator("#needs .badge")).to_have_text("0")
    await as_hana.close()


async def test_a_failed_worker_needs_the_operator(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub = ui.hub
    await scripted(make_agent, runtimes, "lead")
    coder = await make_agent("coder", runtime={"kind": "none"})
    page = await ui.signed_in()
    await went_live(page)
    await expect(page.locator("#needs .badge")).to_have_text("0")

    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="ship it"))
    await hub.tasks.wait_idle()
    child = await hub.workers.spawn(
        operator, root.id, SpawnSpec(prompt="run the suite", agent_id="coder")
    )
    await hub.workers.report_result(
        coder.principal, child.id, ResultSpec(success=False, error="the suite hangs")
    )
    listed = page.locator("#needs-list li")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text("worker failed")
    await expect(page.locator("#needs .badge")).to_have_text("1")
    await listed.get_by_role("link", name="coder").click()
    await expect(page.locator("#worker-state")).to_have_text("failed")
