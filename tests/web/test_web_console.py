"""In a real Chromium, the UI as a supervisor's console: a transcript that follows the newest
message and loads older ones, six tabs of one browser live at once over one connection, what
tasks, discussions and meetings wait for, forms that follow the state live, and the
navigation."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.async_api import Page, expect

from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.identity import HumanSpec
from parley.service.workers.records import SpawnSpec, StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import eventually
from tests.integration.test_workers import scripted
from tests.web.conftest import DESKTOP, PHONE, Browsing, shoot, sign_in, went_live

AT_END = "(b) => b.scrollHeight - b.scrollTop - b.clientHeight < 2"


async def quiet_channel(ui: Browsing, operator: Principal, name: str, count: int) -> str:
    """A channel without agents (a post starts no turn) holding ``count`` messages."""
    channel = await ui.hub.channels.create(operator, ChannelSpec(name=name, members=[]))
    for n in range(1, count + 1):
        await ui.hub.channels.post(operator, channel.id, f"message number {n}")
    return channel.id


async def test_the_transcript_follows_the_newest_message_and_loads_older_ones(
    ui: Browsing, operator: Principal
) -> None:
    channel_id = await quiet_channel(ui, operator, "busy", 250)
    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/channels/{channel_id}")
    await went_live(page)
    box = page.locator("#transcript")
    items = box.locator("li.msg")
    await expect(items).to_have_count(200)  # the latest page: #51..#250
    assert await box.evaluate(AT_END), "the transcript opens on its newest message"

    # A new message while the reader is at the end: the transcript follows it.
    await ui.hub.channels.post(operator, channel_id, "message number 251")
    await expect(items.last).to_contain_text("message number 251")
    assert await box.evaluate(AT_END)

    # The reader scrolled up: new messages are counted below, not scrolled to.
    await box.evaluate("(b) => { b.scrollTop = b.scrollHeight / 2; }")
    await ui.hub.channels.post(operator, channel_id, "message number 252")
    await ui.hub.channels.post(operator, channel_id, "message number 253")
    below = page.get_by_role("button", name="2 new ↓")
    await expect(below).to_be_visible()
    assert not await box.evaluate(AT_END)
    await below.click()
    await expect(below).to_be_hidden()
    assert await box.evaluate(AT_END)

    # Older pages on demand: the first 50 come in above, where the reader was stays in view.
    older = page.get_by_role("button", name="Load older messages")
    await older.click()
    await expect(items).to_have_count(253)
    await expect(items.first).to_have_attribute("id", "msg-1")
    await expect(older).to_be_hidden()  # nothing older than #1


async def test_six_tabs_of_one_browser_are_live_at_once_over_one_connection(
    ui: Browsing, operator: Principal
) -> None:
    channel_id = await quiet_channel(ui, operator, "six", 1)
    first = await ui.signed_in()
    tabs: list[Page] = [first]
    for _ in range(5):
        tabs.append(await ui.context.new_page())
    for tab in tabs:
        await tab.goto(f"{ui.url}/ui/channels/{channel_id}")
    for tab in tabs:
        await went_live(tab)
    # One shared stream carries the six pages' streams (an HTTP/1.1 browser holds only six
    # connections to one origin: one stream per tab would hang the sixth).
    shared = ui.served.app.state.web_shared

    async def one_stream_of_six() -> bool:
        # ... and the navigation's badge, carried once for all six.
        return [len(relays) for relays in shared.values()] == [7]

    await eventually(one_stream_of_six, "one shared stream carrying six page streams")
    await ui.hub.channels.post(operator, channel_id, "to every tab")
    for tab in tabs:
        await expect(tab.locator("#transcript")).to_contain_text("to every tab")
    # A seventh tab, on another page, is live too; closing tabs leaves the others live.
    seventh = await ui.context.new_page()
    await seventh.goto(f"{ui.url}/ui/")
    await went_live(seventh)
    for tab in tabs[:3]:
        await tab.close()
    await ui.hub.channels.post(operator, channel_id, "after three closed")
    for tab in tabs[3:]:
        await expect(tab.locator("#transcript")).to_contain_text("after three closed")


async def test_a_remote_members_pending_turn_names_whom_it_waits_for_and_until_when(
    ui: Browsing, operator: Principal, make_agent: MakeAgent
) -> None:
    rem = await make_agent("rem", runtime={"kind": "remote"})
    channel = await ui.hub.channels.create(
        operator, ChannelSpec(name="remote-team", members=["rem"], discussion_rounds=1)
    )
    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/channels/{channel.id}")
    await went_live(page)
    await ui.hub.channels.post(operator, channel.id, "rem, your view?")
    turn = await ui.hub.turns.next(rem.principal, timeout_s=15)
    assert turn is not None
    task = page.locator("#tasks .task").first
    waiting = task.locator(".waiting")
    await expect(waiting).to_have_attribute("data-waiting-for", "rem")
    await expect(waiting).to_contain_text("its turn in round 1")
    await expect(waiting.locator("time.until")).to_have_attribute(
        "datetime", turn.deadline.isoformat()
    )
    # The overview names it too.
    overview = await ui.context.new_page()
    await overview.goto(f"{ui.url}/ui/")
    await expect(overview.locator("#running-h + ul .waiting")).to_contain_text("rem")
    await ui.hub.turns.speak(rem.principal, turn.id, "ship it")
    await expect(task).to_have_attribute("data-status", "finished")
    await expect(task.locator(".waiting")).to_have_count(0)


async def test_a_discussion_waits_for_its_summary_and_its_forms_go_when_it_is_closed(
    ui: Browsing,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    tmp_path: Path,
) -> None:
    from parley.adapters.runtimes.scripted import ScriptedRuntime
    from parley.core.runtime import NO_REPLY

    runtimes.set("lead", ScriptedRuntime(lambda turn: NO_REPLY))
    runtimes.set("rev", ScriptedRuntime(lambda turn: "rev: looks fine"))
    lead = await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(tmp_path))
    await make_agent("rev", runtime={"kind": "scripted"}, accepts_channels_from=["lead"])
    assert lead.principal.work_channel_id is not None
    channel = await ui.hub.discussions.create_private_channel(
        lead.principal, "design", ["rev"], lead.principal.work_channel_id, "Pick a queue design"
    )
    await ui.hub.tasks.wait_idle()
    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/channels/{channel.id}")
    await went_live(page)
    await expect(page.locator("#guide")).to_contain_text("Pick a queue design")
    # Its rounds are over, the discussion is still open: it waits for lead's summary.
    wait = page.locator("#channel-wait .waiting")
    await expect(wait).to_have_attribute("data-waiting-for", "lead")
    await expect(wait).to_contain_text("discuss_callback")
    await expect(wait).to_contain_text("reminded")
    await shoot(page, ui.screenshots, "discussion-waiting")
    post = page.get_by_role("button", name="Post", exact=True)
    close = page.get_by_role("button", name="Force-close discussion")
    await expect(post).to_be_visible()
    await page.get_by_label("Post as operator").fill("typed, not sent")
    # Closed elsewhere: the page's forms go at once, and why it closed shows beside the tasks.
    await ui.hub.discussions.force_close(operator, channel.id, "nobody will finish it")
    await expect(page.locator("#channel-closed")).to_contain_text("nobody will finish it")
    await expect(post).to_have_count(0)
    await expect(close).to_have_count(0)
    await expect(page.locator("#actions-closed")).to_contain_text("closed")
    await expect(page.locator("#channel-wait")).to_have_count(0)


async def test_navigation_marks_the_page_keeps_deep_links_and_answers_unknown_pages(
    ui: Browsing, operator: Principal
) -> None:
    human = await ui.hub.identity.create_human(operator, HumanSpec(id="hana"))
    channel = await ui.hub.channels.create(operator, ChannelSpec(name="deep", members=["hana"]))
    channel_id = channel.id
    # A deep link survives the sign-in.
    page = await ui.context.new_page()
    await page.goto(f"{ui.url}/ui/channels/{channel_id}")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.get_by_label("Token").fill(human.token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{ui.url}/ui/channels/{channel_id}")
    # The current page is marked; a human is not offered the operator's event log.
    nav = page.get_by_role("navigation", name="Main")
    await expect(nav.get_by_role("link", name="Channels")).to_have_attribute("aria-current", "page")
    await expect(nav.locator("[aria-current]")).to_have_count(1)
    await expect(nav.get_by_role("link", name="Events")).to_have_count(0)
    # Ctrl+Enter posts.
    await page.get_by_label("Post as hana").fill("sent from the keyboard")
    await page.get_by_label("Post as hana").press("Control+Enter")
    await expect(page.locator("#transcript")).to_contain_text("sent from the keyboard")
    # An unknown page is a page saying so.
    missing = await page.goto(f"{ui.url}/ui/no/such/page")
    assert missing is not None and missing.status == 404
    assert missing.headers["content-type"].startswith("text/html")
    await expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    # The operator sees the event log, marked when open; the favicon needs no sign-in.
    browser = ui.context.browser
    assert browser is not None and ui.hub.operator_token is not None
    elsewhere = await browser.new_context()
    try:
        operator_page = await elsewhere.new_page()
        await sign_in(operator_page, ui.url, ui.hub.operator_token)
        await operator_page.get_by_role("link", name="Events").click()
        await expect(
            operator_page.get_by_role("navigation", name="Main").get_by_role("link", name="Events")
        ).to_have_attribute("aria-current", "page")
    finally:
        await elsewhere.close()
    async with httpx.AsyncClient() as client:
        icon = await client.get(f"{ui.url}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")


async def test_the_event_log_pages_newest_first_with_linked_subjects(
    ui: Browsing, operator: Principal
) -> None:
    made = [
        await ui.hub.channels.create(operator, ChannelSpec(name=f"c{n:02d}", members=[]))
        for n in range(60)
    ]
    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/events?type=channel.created")
    rows = page.locator("#events tbody tr")
    await expect(rows).to_have_count(50)
    # Newest first, each subject a link to its page.
    newest = rows.first.get_by_role("link", name=f"channel …{made[-1].id[-6:]}")
    await expect(newest).to_be_visible()
    await page.get_by_role("link", name="Older events").click()
    await expect(rows).to_have_count(10)
    await expect(rows.last.get_by_role("link")).to_have_attribute(
        "href", f"/ui/channels/{made[0].id}"
    )
    await expect(page.get_by_role("link", name="Older events")).to_have_count(0)
    await page.get_by_role("link", name="Newest events").click()
    await expect(rows).to_have_count(50)
    await rows.first.get_by_role("link", name=f"channel …{made[-1].id[-6:]}").click()
    await expect(page.get_by_role("heading", name="c59")).to_be_visible()


async def test_on_a_phone_tables_are_cards_and_nothing_is_clipped(
    ui: Browsing, operator: Principal, make_agent: MakeAgent
) -> None:
    for name in ("alpha", "beta", "gamma"):
        await make_agent(name, runtime={"kind": "scripted"})
    for n in range(60):
        await ui.hub.channels.create(operator, ChannelSpec(name=f"p{n:02d}", members=[]))
    page = await ui.signed_in()
    await page.set_viewport_size({"width": 390, "height": 844})

    async def fits(where: str) -> None:
        # Every cell of the table lies inside the page's width: no column is cut off.
        overflow = await page.evaluate(
            """(sel) => [...document.querySelectorAll(sel + ' td')].filter(
                (td) => td.getBoundingClientRect().right > window.innerWidth + 0.5).length""",
            where,
        )
        assert overflow == 0, where
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    await expect(page.locator("#agents-h + table td[data-label=Blockers]").first).to_be_visible()
    await fits("#agents-h + table")
    await page.goto(f"{ui.url}/ui/events")
    await expect(page.locator("#events tbody tr")).to_have_count(50)
    await fits("#events")
    # A page of the log is a page, not a scroll of every event.
    height = await page.evaluate("document.documentElement.scrollHeight")
    assert height < 20_000, height


CUT_OFF = """() => {
    // Whatever lies beyond the window's right edge, or is hidden in a table's own scroll.
    const width = window.innerWidth;
    const out = [];
    for (const el of document.querySelectorAll("main *")) {
        const box = el.getBoundingClientRect();
        if (box.width > 0 && box.right > width + 0.5) out.push(el.tagName + " " + el.textContent);
    }
    for (const table of document.querySelectorAll("table.list")) {
        if (table.scrollWidth > table.clientWidth + 1) out.push("table #" + table.id + " scrolls");
    }
    if (document.documentElement.scrollWidth > width) out.push("the page scrolls sideways");
    return out;
}"""


async def test_nothing_is_cut_off_at_a_desktop_or_a_phone_width(
    ui: Browsing,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    tmp_path: Path,
) -> None:
    from parley.adapters.runtimes.scripted import ScriptedRuntime
    from parley.core.runtime import NO_REPLY

    for name in ("alpha", "beta", "gamma"):
        await make_agent(name, runtime={"kind": "scripted"})
    runtimes.set("lead", ScriptedRuntime(lambda turn: NO_REPLY))
    runtimes.set("rev", ScriptedRuntime(lambda turn: "rev: looks fine"))
    lead = await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(tmp_path))
    await make_agent("rev", runtime={"kind": "scripted"}, accepts_channels_from=["lead"])
    assert lead.principal.work_channel_id is not None
    channel = await ui.hub.discussions.create_private_channel(
        lead.principal, "design", ["rev"], lead.principal.work_channel_id, "Pick a queue design"
    )
    await ui.hub.tasks.wait_idle()
    # A reason typed as one long word (a path, say) wraps instead of widening the page.
    reason = "/srv/" + "x" * 150 + "/summary.md"
    await ui.hub.discussions.force_close(operator, channel.id, reason)
    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/channels/{channel.id}")
    await expect(page.locator("#channel-closed")).to_contain_text(reason)
    trace = await page.locator("#tasks .task a").first.get_attribute("href")
    assert trace is not None and trace.endswith("/trace")
    pages = {
        "/ui/": "#agents-h + table td",
        f"/ui/channels/{channel.id}": "#channel-closed",
        trace: "#invocations td",
        "/ui/usage": "#usage td",
    }
    for size in (DESKTOP, PHONE):
        await page.set_viewport_size(size)
        for path, shown in pages.items():
            await page.goto(f"{ui.url}{path}")
            await expect(page.locator(shown).first).to_be_visible()
            assert await page.evaluate(CUT_OFF) == [], (size["width"], path)
    # At 1280 px the navigation is one row, the operator named once ("operator", not
    # "operator (operator)").
    await page.set_viewport_size(DESKTOP)
    await page.goto(f"{ui.url}/ui/")
    await expect(page.locator(".notify-ask")).to_be_visible()
    await expect(page.locator(".who .me")).to_have_text("operator")
    tops = await page.evaluate(
        """() => [...document.querySelector("header.top").children]
            .filter((e) => e.getBoundingClientRect().width > 0)
            .map((e) => e.getBoundingClientRect().top)"""
    )
    assert max(tops) - min(tops) < 12, tops


async def test_no_link_leads_to_a_page_the_viewer_is_refused_and_generated_ids_are_short(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub = ui.hub
    await scripted(make_agent, runtimes, "lead")
    await scripted(make_agent, runtimes, "helper")
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await hub.tasks.wait_idle()
    child = await hub.workers.spawn(
        operator, root.id, SpawnSpec(prompt="Find the flaky tests", agent_id="helper")
    )
    await hub.tasks.wait_idle()
    short = f"…{root.id[-6:]}"

    # The child's agent sees its own worker, not the parent above it: the parent's id is shown,
    # not linked to a page that would answer 404.
    helper_token = await hub.identity.issue_token(operator, "helper", rotate=False)
    as_helper = await ui.context.browser.new_context(viewport=PHONE)  # type: ignore[union-attr]
    page = await as_helper.new_page()
    await sign_in(page, ui.url, helper_token)
    await page.goto(f"{ui.url}/ui/workers")
    parent = page.locator(f'#workers tr[data-worker="{child.id}"] td[data-label=Parent]')
    await expect(parent).to_have_text(short)
    await expect(parent.get_by_role("link")).to_have_count(0)
    # Its inbox names the parent worker that sent the task by a short id, whole in its tooltip.
    await page.goto(f"{ui.url}/ui/mail")
    sender = page.locator("#inbox td[data-label=From] code").first
    await expect(sender).to_have_text(short)
    await expect(sender).to_have_attribute("title", root.id)
    assert await page.evaluate(CUT_OFF) == []
    await as_helper.close()

    # The operator may open the parent.
    operator_page = await ui.signed_in()
    await operator_page.goto(f"{ui.url}/ui/workers")
    # On a phone each cell's label stands in its own column and all the cell holds (a pill, an
    # end reason, what the worker waits for) beside it; a pill is as wide as its word.
    await operator_page.set_viewport_size(PHONE)
    await expect(operator_page.locator("#workers .waiting").first).to_be_visible()
    astray = await operator_page.evaluate(
        """() => [...document.querySelectorAll("#workers td[data-label]")].flatMap((td) => {
            const left = td.getBoundingClientRect().left + 100;
            return [...td.querySelectorAll("*")].filter((el) => {
                const box = el.getBoundingClientRect();
                const wide = el.matches(".pill") && box.width > 150;
                return box.width > 0 && (box.left < left || wide);
            }).map((el) => td.dataset.label + ": " + el.outerHTML.slice(0, 60));
        })"""
    )
    assert astray == []
    await operator_page.set_viewport_size(DESKTOP)
    row = operator_page.locator(f'#workers tr[data-worker="{child.id}"]')
    await row.get_by_role("link", name=short).click()
    await expect(operator_page.locator("#worker-task")).to_have_text("Audit the tests")
    await operator_page.goto(f"{ui.url}/ui/")
    await expect(operator_page.get_by_role("link", name="helper", exact=True)).to_be_visible()

    # A human is shown the agents but reads none of their inboxes: their names are not links.
    hana = await hub.identity.create_human(operator, HumanSpec(id="hana"))
    as_hana = await ui.context.browser.new_context()  # type: ignore[union-attr]
    hana_page = await as_hana.new_page()
    await sign_in(hana_page, ui.url, hana.token)
    agents = hana_page.locator("#agents-h + table")
    await expect(agents).to_contain_text("helper")
    await expect(agents.get_by_role("link")).to_have_count(0)
    # Nor is their inbox offered on the mail page: only her own.
    await hana_page.goto(f"{ui.url}/ui/mail")
    offered = hana_page.locator("#owners option")
    await expect(offered).to_have_count(1)
    await expect(offered).to_have_attribute("value", "hana")
    await as_hana.close()
