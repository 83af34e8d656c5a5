"""In a real Chromium: convene a meeting and stop it; take over a worker; an agent's session
cannot see or act on another agent's inbox or another room's meeting."""

from __future__ import annotations

import asyncio
import json

from playwright.async_api import expect

from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.service.workers.records import StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import within
from tests.integration.meeting_support import members, room_with
from tests.integration.test_workers import scripted
from tests.web.conftest import Browsing, shoot, went_live


async def test_convene_a_meeting_watch_it_and_stop_it(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub = ui.hub
    team = await members(make_agent, runtimes, ["ada", "bob"])
    team["ada"].speeches = ["ada: ship the queue behind a flag", "ada: agreed"]
    await room_with(hub, operator, ["ada", "bob"], max_rounds=1)
    human = await hub.identity.create_human(operator, HumanSpec(id="hana", display_name="Hana"))
    page = await ui.signed_in(human.token)

    # A meeting that runs to its round cap: the transcript grows live, the moderator's
    # decisions show (here rotation, named as the moderator: a human convener has no model,
    # and nothing failed), then each member's own minutes.
    await page.get_by_role("link", name="Meetings").click()
    await page.get_by_label("Room", exact=True).select_option(label="sync")
    await page.get_by_label("Topic").fill("Release plan")
    await page.get_by_role("button", name="Convene").click()
    await expect(page.get_by_role("heading", name="Release plan")).to_be_visible()
    transcript = page.locator("#transcript")
    await expect(transcript).to_contain_text("ada: ship the queue behind a flag")
    await expect(page.locator("#meeting-state")).to_have_attribute("data-end-reason", "round_cap")
    await expect(page.locator("#meeting-round")).to_contain_text("ended: round_cap · round 1/1")
    await expect(page.locator("#present")).to_contain_text("ada")
    await expect(page.locator("#decisions")).to_contain_text("rotation")
    await expect(page.locator("#decisions")).not_to_contain_text("fallback")
    await expect(page.locator("#decisions .fallback")).to_have_count(0)
    await expect(page.get_by_role("heading", name="Moderator: rotation")).to_be_visible()
    await expect(page.locator("#minutes-ada")).to_contain_text("ada: my minutes")
    await expect(page.locator("#minutes-bob")).to_contain_text("bob: my minutes")

    # A meeting held open by bob's speech: interject, then "Stop this meeting" ends it; the
    # emergency stop (every meeting) asks for a confirmation first.
    team["bob"].speech_gate = asyncio.Event()  # never set: only the stop ends this speech
    team["bob"].speech_started.clear()
    await page.get_by_role("link", name="Meetings").click()
    await page.get_by_label("Topic").fill("Hotfix")
    await page.get_by_role("button", name="Convene").click()
    await expect(page.get_by_role("heading", name="Hotfix")).to_be_visible()
    await within(team["bob"].speech_started.wait(), "bob's speech")
    await expect(page.locator("#meeting-state")).to_have_attribute("data-status", "running")
    await expect(page.locator("#meeting-round")).to_contain_text("running · round 1/1")
    await page.get_by_label("Interject as hana").fill("hana: remember the migration")
    await page.get_by_role("button", name="Interject").click()
    await expect(page.locator("#transcript")).to_contain_text("hana: remember the migration")
    await shoot(page, ui.screenshots, "meeting")
    # Another tab on the same meeting: its forms go, live, once the meeting has ended.
    watching = await ui.context.new_page()
    await watching.goto(page.url)
    await went_live(watching)
    await expect(watching.get_by_role("button", name="Interject")).to_be_visible()
    # The emergency stop, for every meeting, is labelled so and asks for a confirmation;
    # stopping this one meeting does not.
    emergency = page.get_by_role("button", name="Emergency stop: all meetings")
    await expect(emergency).to_be_visible()
    await expect(page.get_by_label("I mean every running meeting")).not_to_be_checked()
    await page.get_by_role("button", name="Stop this meeting").click()
    await expect(watching.locator("#meeting-state")).to_have_attribute("data-status", "ended")
    await expect(watching.get_by_role("button", name="Interject")).to_have_count(0)
    await expect(watching.get_by_role("button", name="Stop this meeting")).to_have_count(0)
    await expect(watching.locator("#actions-closed")).to_contain_text("stopped")
    await expect(page.locator("#meeting-state")).to_have_attribute("data-end-reason", "stopped")
    await expect(page.locator("#meeting-round")).to_contain_text("ended: stopped")
    await expect(page.locator("#transcript")).to_contain_text("[Meeting stopped]")


async def test_take_over_a_worker_and_see_the_takeover(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub = ui.hub
    coder = await scripted(make_agent, runtimes, "coder")
    coder.gate("refactor the parser")
    root = await hub.workers.start(
        operator, StartSpec(agent_id="coder", prompt="refactor the parser")
    )
    await within(coder.started["refactor the parser"].wait(), "the worker's turn")
    page = await ui.signed_in()
    await page.get_by_role("link", name="Workers").click()
    await expect(page.locator("#workers")).to_contain_text("running")
    await page.locator(f'#workers tr[data-worker="{root.id}"] a').first.click()
    await expect(page.locator("#worker-state")).to_have_text("running")

    await page.get_by_label("Take over with an instruction").fill("Keep the old API.")
    await page.get_by_role("button", name="Take over").click()
    await expect(page.locator("#takeovers")).to_contain_text("system.takeover_initiated")
    await expect(page.locator("#takeovers")).to_contain_text("system.takeover_consumed")
    await expect(page.locator("#takeovers .instruction")).to_contain_text("Keep the old API.")
    await expect(page.locator("#worker-state")).to_have_text("idle")
    assert coder.cancelled == ["refactor the parser"]
    assert "Keep the old API." in coder.turns[-1].prompt.render()

    # Resume the idle worker with a note: its next turn carries it.
    turns = len(coder.turns)
    await page.get_by_label("Resume with a note").fill("carry on with the docs")
    await page.get_by_role("button", name="Resume").click()
    await expect(page.get_by_role("status").filter(has_text="Worker resumed.")).to_be_visible()
    await ui.hub.tasks.wait_idle()
    assert len(coder.turns) > turns
    assert "carry on with the docs" in coder.turns[-1].prompt.render()

    # A child with its own task, blocking its parent: the tree shows each worker's task.
    await page.get_by_label("Spawn a child with the task").fill("write the tests")
    await page.get_by_label("Block this worker until the child reports").check()
    await page.get_by_role("button", name="Spawn").click()
    tree = page.locator(".tree")
    child = tree.locator("li li")
    await expect(child).to_have_count(1)
    await expect(child).to_contain_text("write the tests")
    await expect(tree.locator("> li")).to_contain_text("refactor the parser")
    await expect(page.locator("#worker-task")).to_contain_text("refactor the parser")
    # The tree folds under a parent, and unfolds.
    await tree.get_by_role("button", name="Fold the workers under").click()
    await expect(child).to_be_hidden()
    await tree.get_by_role("button", name="Fold the workers under").click()
    await expect(child).to_be_visible()
    await shoot(page, ui.screenshots, "worker")

    # The list shows each worker's task and state.
    listing = await ui.context.new_page()
    await listing.goto(f"{ui.url}/ui/workers")
    await expect(listing.locator(f'#workers tr[data-worker="{root.id}"]')).to_contain_text(
        "refactor the parser"
    )
    await expect(listing.locator("#workers")).to_contain_text("write the tests")
    await shoot(listing, ui.screenshots, "workers")

    # Another tab on the worker: once it is killed its forms go, live.
    watching = await ui.context.new_page()
    await watching.goto(page.url)
    await went_live(watching)
    await expect(watching.get_by_role("button", name="Take over")).to_be_visible()
    await page.get_by_role("button", name="Cancel worker").click()
    await expect(page.locator("#worker-state")).to_have_text("killed")
    await expect(watching.locator("#worker-state")).to_have_text("killed")
    for name in ("Take over", "Spawn", "Cancel worker", "Resume"):
        await expect(watching.get_by_role("button", name=name)).to_have_count(0)
    await expect(watching.locator("#actions-closed")).to_contain_text("killed")
    await expect(listing.locator(f'#workers tr[data-worker="{root.id}"] .pill')).to_have_text(
        "killed"
    )


async def test_an_agent_cannot_see_or_act_on_anothers_inbox_or_meeting(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub: Hub = ui.hub
    await members(make_agent, runtimes, ["ada", "bob", "cy"])
    mine = await room_with(hub, operator, ["ada"])
    theirs = await hub.rooms.create(operator, RoomSpec(name="other"))
    await hub.rooms.join(operator, theirs.id, "bob")
    await hub.rooms.join(operator, theirs.id, "cy")
    meeting = await hub.meetings.convene(operator, theirs.id, ConveneSpec(topic="secret plan"))
    ada = await hub.identity.issue_token(operator, "ada", rotate=False)

    page = await ui.signed_in(ada)
    await page.goto(f"{ui.url}/ui/mail?owner=bob")
    await expect(page.locator("#mail-error")).to_contain_text("Refused (")
    await expect(page.locator("#inbox")).to_contain_text("No mail matches")

    response = await page.goto(f"{ui.url}/ui/meetings/{meeting.id}")
    assert response is not None and response.status in (403, 404)
    await expect(page.locator("#refused")).to_contain_text("Refused (")
    await expect(page.locator("body")).not_to_contain_text("secret plan")

    await page.goto(f"{ui.url}/ui/meetings")
    await expect(page.locator("main")).to_contain_text(mine.name)
    await expect(page.locator("main")).not_to_contain_text("other")

    # Acting on the other room's meeting with the page's own CSRF token is refused by the
    # meeting service, and nothing is said in the meeting.
    csrf = await page.locator('input[name="csrf"]').first.get_attribute("value")
    r = await page.request.post(
        f"{ui.url}/ui/meetings/{meeting.id}/post",
        form={"content": "ada was here", "csrf": csrf or ""},
        headers={"Origin": ui.url},
    )
    # Redirected back to the meeting's page, which the viewer may not see either.
    assert r.status == 403 and "Refused (" in await r.text()
    transcript = await hub.meetings.transcript(operator, meeting.id)
    assert "ada was here" not in json.dumps([m.content for m in transcript.rows])


async def test_release_an_idle_worker_and_its_forms_go_in_every_tab(
    ui: Browsing, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    hub = ui.hub
    await scripted(make_agent, runtimes, "coder")
    root = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="tidy the docs"))
    await hub.tasks.wait_idle()
    listing = await ui.signed_in()
    await listing.goto(f"{ui.url}/ui/workers")
    await went_live(listing)
    page = await ui.context.new_page()
    await page.goto(f"{ui.url}/ui/workers/{root.id}")
    await went_live(page)
    await expect(page.locator("#worker-state")).to_have_text("idle")
    # No takeover: said in a sentence, not as the first item of a numbered list.
    await expect(page.locator("p#takeovers")).to_have_text("No takeover.")
    await page.get_by_role("button", name="Release").click()
    await expect(page.locator("#worker-state")).to_have_text("released")
    await expect(page.locator("#actions button")).to_have_count(0)
    # The list in the other tab follows; the state is said once, not again as its end reason.
    state = listing.locator(f'#workers tr[data-worker="{root.id}"] td[data-label=State]')
    await expect(state).to_have_text("released")
    await expect(page.locator("#worker > p").first).not_to_contain_text("· released")


async def test_a_meeting_names_the_remote_member_it_waits_for_and_until_when(
    ui: Browsing, operator: Principal, make_agent: MakeAgent
) -> None:
    hub = ui.hub
    rem = await make_agent("rem", runtime={"kind": "remote"})
    room = await room_with(hub, operator, ["rem"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="Remote check"))
    turn = await hub.turns.next(rem.principal, timeout_s=15)
    assert turn is not None
    page = await ui.signed_in()
    await page.goto(f"{ui.url}/ui/meetings/{meeting.id}")
    await went_live(page)
    waiting = page.locator("#meeting-state .waiting")
    await expect(waiting).to_have_attribute("data-waiting-for", "rem")
    await expect(waiting.locator("time.until")).to_have_attribute(
        "datetime", turn.deadline.isoformat()
    )
    # A list with nothing in it yet is not numbered.
    await hub.turns.speak(rem.principal, turn.id, "rem: all set, ship it on Thursday")
    await expect(page.locator("#transcript")).to_contain_text("rem: all set, ship it on Thursday")
    # The rounds are over and the meeting still runs: it waits for rem's minutes, and says so.
    await expect(page.locator("#meeting-state")).to_have_attribute("data-end-reason", "round_cap")
    await expect(page.locator("#meeting-round")).to_contain_text("ending: round_cap")
    await expect(waiting).to_contain_text("its minutes of the meeting")
    minutes = await hub.turns.next(rem.principal, timeout_s=15)
    assert minutes is not None
    # Minutes are shorter than the transcript they sum up.
    await hub.turns.speak(rem.principal, minutes.id, "rem: ok")
    await expect(page.locator("#meeting-state")).not_to_have_attribute("data-status", "running")
    await expect(waiting).to_have_count(0)
    await expect(page.locator("#minutes-rem")).to_contain_text("rem: ok")
    # Each member's state on the rooms page is drawn in its state's colour, not the text's
    # (rem went back to work; ida waits idle in another room).
    await make_agent("ida", runtime={"kind": "none"})
    await room_with(hub, operator, ["ida"])
    await page.get_by_role("link", name="Meetings").click()
    await expect(page.locator("main .pill").first).to_be_visible()
    plain = await page.evaluate(
        """() => [...document.querySelectorAll("main .pill")]
            .filter((p) => getComputedStyle(p).color === getComputedStyle(document.body).color)
            .map((p) => p.className)"""
    )
    assert plain == []
