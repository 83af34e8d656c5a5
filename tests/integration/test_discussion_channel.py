"""Discussion channels: create (C3), the template moderator (C4), idle reminders (C6), the
callback and its refusals (C8), waking the origin (C9), stale reminders and force-close (C15)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core import discussion as d
from parley.core.channels import Channel
from parley.core.clock import iso
from parley.core.errors import Conflict, InvalidRequest, NotFound, ParleyError, PermissionDenied
from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.core.runtime import NO_REPLY, Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.discussion_support import invocations, messages, within

METADATA_FIELDS = {
    "mode",
    "discussionChannelId",
    "originChannelId",
    "initiatorAgentId",
    "initiatorSessionId",
    "discussGuide",
    "status",
    "createdAt",
    "summaryPath",
    "completedAt",
}


class Team:
    """An initiator with a workspace and a reviewer, both scripted; the initiator's work-channel
    turns (wakes) are kept apart from its discussion turns."""

    def __init__(self, lead: AgentHandle, rev: AgentHandle, workspace: Path) -> None:
        self.lead = lead
        self.rev = rev
        self.workspace = workspace
        self.wakes: list[Turn] = []
        self.discussion_turns: list[Turn] = []
        self.lead_says: str = NO_REPLY
        self.rev_says: str = NO_REPLY

    @property
    def origin(self) -> str:
        assert self.lead.principal.work_channel_id is not None
        return self.lead.principal.work_channel_id

    def lead_reply(self, turn: Turn) -> str:
        if turn.channel_id == self.origin:
            self.wakes.append(turn)
            return "Read the summary; continuing the original task."
        self.discussion_turns.append(turn)
        return self.lead_says

    def rev_reply(self, turn: Turn) -> str:
        self.discussion_turns.append(turn)
        return self.rev_says


@pytest.fixture
async def team(make_agent: MakeAgent, runtimes: StaticRuntimes, tmp_path: Path) -> Team:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    lead = await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(workspace))
    rev = await make_agent(
        "rev",
        runtime={"kind": "scripted"},
        workspace=str(tmp_path / "rev"),
        accepts_channels_from=["lead", "bare"],
    )
    t = Team(lead, rev, workspace)
    runtimes.set("lead", ScriptedRuntime(t.lead_reply))
    runtimes.set("rev", ScriptedRuntime(t.rev_reply))
    return t


async def open_discussion(hub: Hub, team: Team, guide: str = "Pick a queue design") -> Channel:
    channel = await hub.discussions.create_private_channel(
        team.lead.principal, "design", ["rev"], team.origin, guide
    )
    await hub.tasks.wait_idle()
    return channel


async def refused(call: Any) -> ParleyError:
    with pytest.raises(ParleyError) as caught:
        await call
    return caught.value


# -- C3 create ------------------------------------------------------------------------------------
async def test_without_callback_it_is_a_plain_private_group(
    hub: Hub, team: Team, operator: Principal, api: Any
) -> None:
    channel = await hub.discussions.create_private_channel(
        team.lead.principal, "side chat", ["rev"]
    )
    assert (channel.kind, channel.private, channel.metadata) == ("group", True, {})
    assert channel.members == ["lead", "rev"]
    await hub.tasks.wait_idle()
    assert await messages(hub, channel.id) == []
    assert await hub.tasks.of_channel(operator, channel.id) == []
    r = await api(team.lead.token).post(
        "/v1/channels/private", json={"name": "rest chat", "members": ["rev"]}
    )
    assert r.status_code == 201, r.text
    assert (r.json()["kind"], r.json()["private"], r.json()["metadata"]) == ("group", True, {})


async def test_with_callback_it_records_the_discussion_metadata(
    hub: Hub, team: Team, operator: Principal, clock: FakeClock
) -> None:
    channel = await open_discussion(hub, team, "Decide the retry policy")
    meta = channel.metadata
    assert set(meta) == METADATA_FIELDS
    async with hub.store.read() as tx:
        session = await tx.session_for("lead", team.origin)
        stored = await tx.get_channel(channel.id)
    assert session is not None and stored is not None
    assert meta == {
        "mode": "discussion",
        "discussionChannelId": channel.id,
        "originChannelId": team.origin,
        "initiatorAgentId": "lead",
        "initiatorSessionId": session.id,
        "discussGuide": "Decide the retry policy",
        "status": "active",
        "createdAt": iso(clock.now()),
        "summaryPath": None,
        "completedAt": None,
    }
    assert stored.metadata == meta
    assert (stored.kind, stored.private, stored.status) == ("discussion", True, "active")
    assert stored.members == ["lead", "rev"]
    # The moderator's kickoff starts the rounds, with the guide as the task.
    kickoff = (await messages(hub, channel.id))[0]
    assert (kickoff.sender_id, kickoff.sender_kind) == ("moderator", "moderator")
    assert kickoff.content == d.kickoff("Decide the retry policy", channel.id)
    [task] = await hub.tasks.of_channel(operator, channel.id)
    assert (task.trigger_id, task.mode, task.members) == (kickoff.id, "discussion", ["lead", "rev"])
    for turn in team.discussion_turns:
        assert turn.prompt.user_text().startswith("## User task\nDecide the retry policy\n")
        assert "moderated discussion" in turn.prompt.system


async def test_create_refusals(hub: Hub, team: Team, api: Any) -> None:
    lead = team.lead.principal
    rev_work = team.rev.principal.work_channel_id
    cases = [
        (
            hub.discussions.create_private_channel(lead, "x", ["rev"], team.origin, None),
            InvalidRequest,
            "guide_required",
        ),
        (
            hub.discussions.create_private_channel(lead, "x", ["rev"], team.origin, "  "),
            InvalidRequest,
            "guide_required",
        ),
        (
            hub.discussions.create_private_channel(lead, "x", ["rev"], None, "a guide"),
            InvalidRequest,
            "guide_without_callback",
        ),
        (
            hub.discussions.create_private_channel(lead, "x", ["rev"], "01NOSUCHCHANNEL", "g"),
            NotFound,
            "callback_channel_not_found",
        ),
        (
            hub.discussions.create_private_channel(lead, "x", ["rev"], rev_work, "g"),
            PermissionDenied,
            "callback_channel_forbidden",
        ),
        (
            hub.discussions.create_private_channel(lead, "x", ["nobody"], team.origin, "g"),
            NotFound,
            "member_not_found",
        ),
    ]
    for call, kind, code in cases:
        error = await refused(call)
        assert isinstance(error, kind) and error.code == code, (code, error)
    r = await api(team.lead.token).post(
        "/v1/channels/private",
        json={"name": "x", "members": ["rev"], "callbackChannelId": team.origin},
    )
    assert (r.status_code, r.json()["code"]) == (400, "guide_required")
    r = await api(hub.operator_token).post(
        "/v1/channels/private",
        json={"name": "x", "callbackChannelId": team.origin, "discussGuide": "g"},
    )
    assert (r.status_code, r.json()["code"]) == (403, "initiator_must_be_agent")
    async with hub.store.read() as tx:
        c = tx.table("channels").c
        assert await tx.select("channels", c.kind == "discussion") == []


# -- C4 / C6 moderator in a discussion ------------------------------------------------------------
async def test_a_silent_round_reminds_the_initiator_and_the_discussion_stays_open(
    hub: Hub, team: Team, operator: Principal
) -> None:
    channel = await open_discussion(hub, team)
    stored = await messages(hub, channel.id)
    assert [(m.sender_kind, m.content.splitlines()[0]) for m in stored] == [
        ("moderator", "[Discussion Started]"),
        ("moderator", "[Discussion Idle]"),
    ]
    assert stored[1].content == d.IDLE_REMINDER
    [task] = await hub.tasks.of_channel(operator, channel.id)
    assert (task.end_reason, task.current_round, task.calls) == ("idle", 1, 2)
    now = await hub.channels.get(operator, channel.id)
    assert (now.status, now.metadata["status"]) == ("active", "active")
    # The discussion goes on when someone speaks again.
    team.rev_says = "One more point: retries need jitter."
    await hub.channels.post(team.lead.principal, channel.id, "let's continue")
    await hub.tasks.wait_idle()
    tasks = await hub.tasks.of_channel(operator, channel.id)
    assert len(tasks) == 2
    assert tasks[1].end_reason == "max_rounds"
    last = (await messages(hub, channel.id))[-1]
    assert last.sender_kind == "moderator"
    assert last.content.startswith("[Discussion Rounds Ended]")


async def test_unanimous_end_in_a_discussion_does_not_close_it(
    hub: Hub, team: Team, operator: Principal
) -> None:
    team.lead_says = "Use one queue. [[DISCUSSION_DONE]]"
    team.rev_says = "Agreed. [[DISCUSSION_DONE]]"
    channel = await open_discussion(hub, team)
    [task] = await hub.tasks.of_channel(operator, channel.id)
    assert task.end_reason == "unanimous"
    stored = await messages(hub, channel.id)
    assert [m.content for m in stored[1:3]] == ["Use one queue.", "Agreed."]
    assert stored[-1].content == d.rounds_ended("unanimous", task.rounds)
    assert (await hub.channels.get(operator, channel.id)).status == "active"


# -- C8 callback ----------------------------------------------------------------------------------
async def test_callback_refusals_each_have_their_own_code(
    hub: Hub, team: Team, operator: Principal, make_agent: MakeAgent, tmp_path: Path
) -> None:
    channel = await open_discussion(hub, team)
    lead = team.lead.principal
    (tmp_path / "outside.md").write_text("secret")
    (tmp_path / "x.md").write_text("above the workspace")
    (team.workspace / "link.md").symlink_to(tmp_path / "outside.md")
    (team.workspace / "sub").mkdir()
    group = await hub.channels.create(operator, ChannelSpec(name="g", members=["lead"]))
    cases = [
        (hub.discussions.callback(lead, group.id, "s.md"), "not_discussion_channel"),
        (hub.discussions.callback(lead, team.origin, "s.md"), "not_discussion_channel"),
        (hub.discussions.callback(team.rev.principal, channel.id, "s.md"), "not_initiator"),
        (hub.discussions.callback(operator, channel.id, "s.md"), "not_initiator"),
        (hub.discussions.callback(lead, channel.id, "missing.md"), "summary_missing"),
        (hub.discussions.callback(lead, channel.id, "sub"), "summary_missing"),
        (
            hub.discussions.callback(lead, channel.id, str(tmp_path / "outside.md")),
            "summary_outside_workspace",
        ),
        (hub.discussions.callback(lead, channel.id, "../x.md"), "summary_outside_workspace"),
        (hub.discussions.callback(lead, channel.id, "sub/../../x.md"), "summary_outside_workspace"),
        (hub.discussions.callback(lead, channel.id, "link.md"), "summary_outside_workspace"),
    ]
    for call, code in cases:
        assert (await refused(call)).code == code
    still = await hub.channels.get(operator, channel.id)
    assert (still.status, still.metadata["status"], still.metadata["summaryPath"]) == (
        "active",
        "active",
        None,
    )
    # An initiator without a workspace cannot hand in a summary.
    bare = await make_agent("bare", runtime={"kind": "scripted"})
    bare_channel = await hub.discussions.create_private_channel(
        bare.principal, "d", ["rev"], bare.principal.work_channel_id, "guide"
    )
    await hub.tasks.wait_idle()
    error = await refused(hub.discussions.callback(bare.principal, bare_channel.id, "s.md"))
    assert error.code == "no_workspace"


async def test_callback_closes_the_discussion_and_silences_its_sessions(
    hub: Hub, team: Team, operator: Principal, clock: FakeClock, api: Any
) -> None:
    channel = await open_discussion(hub, team)
    (team.workspace / "notes").mkdir()
    summary = team.workspace / "notes" / "summary.md"
    summary.write_text("one queue, with aging")
    clock.advance(60)
    r = await api(team.lead.token).post(
        f"/v1/channels/{channel.id}/callback", json={"summaryPath": "notes/summary.md"}
    )
    assert r.status_code == 200, r.text
    meta = r.json()["metadata"]
    assert set(meta) == METADATA_FIELDS | {"closedAt"}
    assert meta["summaryPath"] == str(summary.resolve())
    assert meta["status"] == "closed"
    assert meta["completedAt"] == meta["closedAt"] == iso(clock.now())
    assert r.json()["status"] == "closed"
    await hub.tasks.wait_idle()

    async with hub.store.read() as tx:
        stored = await tx.get_channel(channel.id)
        lead_session = await tx.session_for("lead", channel.id)
        rev_session = await tx.session_for("rev", channel.id)
        main_session = await tx.session_for("lead", team.origin)
        lead_row = await tx.get("principals", "lead")
        rev_row = await tx.get("principals", "rev")
    assert stored is not None and stored.metadata == meta
    assert lead_session is not None and rev_session is not None and main_session is not None
    assert lead_session.model_override == rev_session.model_override == NO_REPLY
    assert main_session.model_override is None  # only this channel's sessions
    assert lead_row.runtime == rev_row.runtime == {"kind": "scripted"}  # never the global model

    # A second callback fails.
    r = await api(team.lead.token).post(
        f"/v1/channels/{channel.id}/callback", json={"summaryPath": "notes/summary.md"}
    )
    assert (r.status_code, r.json()["code"]) == (409, "already_completed")

    # From now on the channel answers only with the moderator's closed notice; no task starts.
    tasks_before = await hub.tasks.of_channel(operator, channel.id)
    turns_before = len(team.discussion_turns)
    count_before = len(await messages(hub, channel.id))
    for who in (team.rev.principal, operator):
        posted = await hub.channels.post(who, channel.id, "but wait, one more thing")
        assert posted.task_id is None
    await hub.tasks.wait_idle()
    after = (await messages(hub, channel.id))[count_before:]
    assert [(m.sender_kind, m.content) for m in after] == [
        ("agent", "but wait, one more thing"),
        ("moderator", d.CHANNEL_CLOSED),
        ("human", "but wait, one more thing"),
        ("moderator", d.CHANNEL_CLOSED),
    ]
    assert await hub.tasks.of_channel(operator, channel.id) == tasks_before
    assert len(team.discussion_turns) == turns_before


async def test_callback_rejects_replies_still_in_flight(
    hub: Hub, team: Team, operator: Principal, runtimes: StaticRuntimes
) -> None:
    """A reply that returns after the callback is not posted in the closed channel."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_rev(turn: Turn) -> str:
        entered.set()
        await release.wait()
        return "late thought"

    runtimes.set("rev", ScriptedRuntime(slow_rev))
    team.lead_says = "my position"
    channel = await hub.discussions.create_private_channel(
        team.lead.principal, "design", ["rev"], team.origin, "guide"
    )
    await within(entered.wait(), "rev's call")
    (team.workspace / "s.md").write_text("done")

    async def commit_after_callback(turn: Turn) -> None:
        if turn.agent.id == "rev":
            await hub.discussions.callback(team.lead.principal, channel.id, "s.md")

    hub.tasks.before_commit = commit_after_callback
    release.set()
    await hub.tasks.wait_idle()
    stored = await messages(hub, channel.id)
    assert "late thought" not in [m.content for m in stored]
    [task] = await hub.tasks.of_channel(operator, channel.id)
    assert task.end_reason in ("closed", "cancelled")
    trace = await invocations(hub, task.id)
    assert [(i.agent_id, i.outcome, i.reason) for i in trace] == [
        ("lead", "accepted", None),
        ("rev", "rejected", "cancelled"),
    ]


# -- C9 origin wake -------------------------------------------------------------------------------
async def test_the_result_wakes_the_origin_session_once_with_the_summary_path(
    hub: Hub, team: Team, operator: Principal
) -> None:
    channel = await open_discussion(hub, team)
    (team.workspace / "summary.md").write_text("conclusion")
    await hub.discussions.callback(team.lead.principal, channel.id, "summary.md")
    await hub.tasks.wait_idle()
    path = str((team.workspace / "summary.md").resolve())
    assert len(team.wakes) == 1
    wake = team.wakes[0]
    assert path in wake.prompt.user_text()
    assert wake.prompt.user_text().startswith("## User task\n[Discussion Result Ready]")
    origin = await messages(hub, team.origin)
    ready = origin[-2]
    assert (ready.sender_id, ready.sender_kind) == ("moderator", "moderator")
    assert ready.content == d.result_ready(path, channel.id)
    assert ready.metadata == {"discussionChannelId": channel.id, "summaryPath": path}
    assert wake.trigger_id == ready.id
    assert (origin[-1].sender_id, origin[-1].trigger_id) == ("lead", ready.id)
    [task] = await hub.tasks.of_channel(operator, team.origin)
    assert (task.mode, task.members, task.end_reason) == ("wake", ["lead"], "replied")


# -- C15 stale and force-close --------------------------------------------------------------------
async def test_a_stale_discussion_reminds_once_per_idle_period(
    hub: Hub, team: Team, operator: Principal, clock: FakeClock
) -> None:
    channel = await open_discussion(hub, team)
    stale_s = hub.settings.discussion_stale_s
    assert await hub.discussions.remind_stale() == []
    clock.advance(stale_s - 1)
    assert await hub.discussions.remind_stale() == []
    clock.advance(2)
    assert await hub.discussions.remind_stale() == [channel.id]
    assert await hub.discussions.remind_stale() == []  # not twice in the same period
    clock.advance(stale_s / 2)
    assert await hub.discussions.remind_stale() == []
    clock.advance(stale_s / 2 + 1)
    assert await hub.discussions.remind_stale() == [channel.id]
    reminders = [m for m in await messages(hub, channel.id) if "[Discussion Stale]" in m.content]
    assert len(reminders) == 2
    assert all(m.sender_kind == "moderator" for m in reminders)
    minutes = int((stale_s + 1) // 60)
    assert reminders[0].content == d.stale_reminder(minutes)
    # The initiator also finds each reminder in its inbox (an MCP agent waits on its mail).
    async with hub.store.read() as tx:
        inbox = await tx.list_inbox(team.lead.id, InboxFilter(limit=1000))
    stale_notes = [m for m in inbox if m.payload.get("idle_minutes") is not None]
    assert stale_notes[0].body == d.stale_reminder(minutes)
    assert len(stale_notes) == 2
    assert all(m.payload["channel_id"] == channel.id for m in stale_notes)
    # A closed discussion is never reminded.
    (team.workspace / "s.md").write_text("x")
    await hub.discussions.callback(team.lead.principal, channel.id, "s.md")
    await hub.tasks.wait_idle()
    clock.advance(stale_s * 3)
    assert await hub.discussions.remind_stale() == []


async def test_only_the_operator_may_force_close_and_the_origin_is_told(
    hub: Hub, team: Team, operator: Principal, api: Any
) -> None:
    channel = await open_discussion(hub, team)
    r = await api(team.lead.token).post(
        f"/v1/channels/{channel.id}/close", json={"reason": "abandoned"}
    )
    assert (r.status_code, r.json()["code"]) == (403, "operator_only")
    error = await refused(hub.discussions.force_close(team.rev.principal, channel.id, "x"))
    assert error.code == "operator_only"
    assert (await hub.channels.get(operator, channel.id)).status == "active"

    r = await api(hub.operator_token).post(
        f"/v1/channels/{channel.id}/close", json={"reason": "abandoned by the team"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "closed"
    assert r.json()["metadata"]["status"] == "closed"
    assert r.json()["metadata"]["summaryPath"] is None
    await hub.tasks.wait_idle()
    assert (await messages(hub, channel.id))[-1].content == d.CHANNEL_CLOSED
    origin = await messages(hub, team.origin)
    told = [m for m in origin if m.sender_kind == "moderator"]
    assert [m.content for m in told] == [d.force_closed(channel.id, "abandoned by the team")]
    assert len(team.wakes) == 1 and "abandoned by the team" in team.wakes[0].prompt.user_text()
    async with hub.store.read() as tx:
        session = await tx.session_for("rev", channel.id)
    assert session is not None and session.model_override == NO_REPLY
    error = await refused(hub.discussions.force_close(operator, channel.id, "again"))
    assert isinstance(error, Conflict) and error.code == "already_closed"
    error = await refused(hub.discussions.callback(team.lead.principal, channel.id, "s.md"))
    assert error.code == "already_completed"
