"""In a real Chromium: create an agent, a group and a room and send mail from the UI, with the
rules of the API and the CLI; a refusal is shown with its code and message."""

from __future__ import annotations

from playwright.async_api import expect

from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.service.identity import HumanSpec
from tests.web.conftest import Browsing, sign_in


async def test_create_an_agent_a_group_a_room_and_send_mail_from_the_ui(
    ui: Browsing, operator: Principal
) -> None:
    hub = ui.hub
    page = await ui.signed_in()
    await page.get_by_role("link", name="Create").click()
    await expect(page.get_by_role("heading", name="Create", exact=True)).to_be_visible()

    await page.get_by_label("Agent id", exact=True).fill("scout")
    await page.get_by_label("Display name").fill("Scout")
    await page.get_by_role("button", name="Create agent").click()
    await expect(page.get_by_role("status").filter(has_text="Agent created.")).to_be_visible()
    shown = page.get_by_role("status").filter(has_text="shown only now")
    token = (await shown.text_content() or "").rsplit(" ", 1)[-1].strip()
    agent = await hub.identity.authenticate(token)  # the token shown is the agent's
    assert (agent.id, agent.display_name) == ("scout", "Scout")

    # A checkbox sits beside its label, on one line (it was drawn as wide as a text field).
    private = page.get_by_label("Private")
    box = await private.bounding_box()
    line = await page.locator("label", has=private).bounding_box()
    assert box is not None and line is not None
    assert box["width"] < 40 and line["height"] < 2 * box["height"] + 8, (box, line)
    await page.get_by_label("Group name").fill("crew")
    await page.get_by_label("Members", exact=True).fill("scout")
    await page.get_by_role("button", name="Create group").click()
    await expect(page.get_by_role("heading", name="crew")).to_be_visible()
    [crew] = [c for c in await hub.channels.visible(operator) if c.name == "crew"]
    assert "scout" in crew.members

    await page.goto(f"{ui.url}/ui/new")
    await page.get_by_label("Room name").fill("standup")
    await page.get_by_role("button", name="Create room").click()
    await expect(page.get_by_role("status").filter(has_text="Room created.")).to_be_visible()
    assert [r.name for r in (await hub.rooms.page(operator, after=None, limit=10)).rows] == [
        "standup"
    ]

    await page.goto(f"{ui.url}/ui/new")
    await page.get_by_label("To", exact=True).fill("scout")
    await page.get_by_label("Kind").select_option("task")
    await page.get_by_label("Subject").fill("map the north")
    await page.get_by_label("Body").fill("by noon")
    await page.get_by_role("button", name="Send mail as operator").click()
    await expect(page.get_by_role("status").filter(has_text="Mail sent.")).to_be_visible()
    [mail] = await hub.mail.inbox(operator, "scout", InboxFilter())
    assert (mail.from_id, mail.kind, mail.subject, mail.body) == (
        "operator",
        "task",
        "map the north",
        "by noon",
    )

    # The service's refusals, with their codes: an agent id taken, mail to nobody.
    await page.get_by_label("Agent id", exact=True).fill("scout")
    await page.get_by_role("button", name="Create agent").click()
    refusal = page.get_by_role("alert")
    await expect(refusal).to_contain_text("Refused (")
    await expect(refusal).to_contain_text("scout")
    await page.get_by_label("To", exact=True).fill("nobody-here")
    await page.get_by_role("button", name="Send mail as operator").click()
    await expect(page.get_by_role("alert")).to_contain_text("Refused (")
    await expect(page.get_by_role("alert")).to_contain_text("nobody-here")


async def test_a_human_is_refused_what_only_the_operator_may_do(
    ui: Browsing, operator: Principal
) -> None:
    hub = ui.hub
    hana = await hub.identity.create_human(operator, HumanSpec(id="hana"))
    page = await ui.context.new_page()
    await sign_in(page, ui.url, hana.token)
    await page.goto(f"{ui.url}/ui/new")
    await page.get_by_label("Agent id", exact=True).fill("rogue")
    await page.get_by_role("button", name="Create agent").click()
    await expect(page.get_by_role("alert")).to_contain_text("Refused (operator_only)")
    assert await hub.identity.get("rogue") is None


async def test_a_form_without_its_csrf_token_is_refused(ui: Browsing) -> None:
    page = await ui.signed_in()
    response = await page.request.post(f"{ui.url}/ui/rooms/create", form={"name": "sneaky"})
    assert response.status == 403
    operator = await ui.hub.identity.require("operator")
    assert (await ui.hub.rooms.page(operator, after=None, limit=5)).rows == []
