"""C8 callback details: only the initiator's session may finish a discussion (not another
conversation of the same agent), the ``completed`` state is recorded before ``closed`` with its
time, and the kickoff names the callback as the agent calls it on each surface."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.channels import Channel, PendingTurn
from parley.core.clock import iso
from parley.core.errors import PermissionDenied
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.core.runtime import NO_REPLY
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.tools.channels import discuss_callback
from parley.service.tools.registry import ToolCall
from parley.surfaces.cli.discuss import discuss_app
from parley.surfaces.rest.app import create_app
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.discussion_support import messages


class Setup:
    def __init__(self, lead: AgentHandle, rev: AgentHandle, discussion: Channel, group: str):
        self.lead = lead
        self.rev = rev
        self.discussion = discussion
        self.group = group

    @property
    def origin(self) -> str:
        assert self.lead.principal.work_channel_id is not None
        return self.lead.principal.work_channel_id


@pytest.fixture
async def setup(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    tmp_path: Path,
) -> Setup:
    """``lead`` opens a discussion with ``rev`` from its work channel; ``lead`` also sits in a
    group, where it has another session."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "summary.md").write_text("one queue")
    lead = await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(workspace))
    rev = await make_agent("rev", runtime={"kind": "scripted"}, accepts_channels_from=["lead"])
    for name in ("lead", "rev"):
        runtimes.set(name, ScriptedRuntime(lambda _turn: NO_REPLY))
    group = await hub.channels.create(operator, ChannelSpec(name="g", members=["lead", "rev"]))
    assert lead.principal.work_channel_id is not None
    discussion = await hub.discussions.create_private_channel(
        lead.principal, "design", ["rev"], lead.principal.work_channel_id, "Pick a queue"
    )
    await hub.tasks.wait_idle()
    return Setup(lead, rev, discussion, group.id)


async def session_id(hub: Hub, agent: Principal, channel_id: str) -> str:
    async def job(tx: Tx) -> str:
        return (await hub.channels.session(tx, agent, channel_id)).id

    return await hub.store.write(job)


async def status_of(hub: Hub, channel_id: str) -> str:
    async with hub.store.read() as tx:
        channel = await tx.get_channel(channel_id)
    assert channel is not None
    return str(channel.metadata["status"])


async def test_another_session_of_the_initiator_may_not_call_back(
    hub: Hub, setup: Setup, api: Any
) -> None:
    lead = setup.lead.principal
    other = await session_id(hub, lead, setup.group)
    url = f"/v1/channels/{setup.discussion.id}/callback"
    r = await api(setup.lead.token).post(
        url, json={"summaryPath": "summary.md", "session_id": other}
    )
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["code"] == "not_initiator_session"
    assert repr(other) in body["message"] and repr(setup.group) in body["message"]
    assert await status_of(hub, setup.discussion.id) == "active"

    # Another agent's session, or one that does not exist, is not the caller's.
    rev_session = await session_id(hub, setup.rev.principal, setup.discussion.id)
    for sid in (rev_session, "vs-nope"):
        r = await api(setup.lead.token).post(
            url, json={"summaryPath": "summary.md", "session_id": sid}
        )
        assert (r.status_code, r.json()["code"]) == (404, "session_not_found")

    # The session it was opened from may finish it.
    opened_from = setup.discussion.metadata["initiatorSessionId"]
    assert opened_from == await session_id(hub, lead, setup.origin)
    r = await api(setup.lead.token).post(
        url, json={"summaryPath": "summary.md", "session_id": opened_from}
    )
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["status"] == "closed"


async def test_the_initiators_session_in_the_discussion_may_call_back(
    hub: Hub, setup: Setup
) -> None:
    own = await session_id(hub, setup.lead.principal, setup.discussion.id)
    closed = await hub.discussions.callback(
        setup.lead.principal, setup.discussion.id, "summary.md", session_id=own
    )
    assert closed.status == "closed"


async def test_a_tool_call_from_a_turn_in_another_channel_is_refused(
    hub: Hub, setup: Setup
) -> None:
    """A runtime's tool call carries its turn's channel and session: a turn in the group may
    not finish the discussion even when it names it."""
    lead = setup.lead.principal
    in_group = ToolCall(
        hub, lead, channel_id=setup.group, session_id=await session_id(hub, lead, setup.group)
    )
    args = {"summaryPath": "summary.md", "discussion_id": setup.discussion.id}
    with pytest.raises(PermissionDenied) as caught:
        await discuss_callback.run(in_group, args)
    assert caught.value.code == "not_initiator_session"
    in_discussion = ToolCall(
        hub,
        lead,
        channel_id=setup.discussion.id,
        session_id=await session_id(hub, lead, setup.discussion.id),
    )
    result = await discuss_callback.run(in_discussion, {"summaryPath": "summary.md"})
    assert result["discussion"]["status"] == "closed"


async def test_completed_is_recorded_before_closed_with_its_time(
    hub: Hub, setup: Setup, clock: FakeClock
) -> None:
    clock.advance(90)
    closed = await hub.discussions.callback(setup.lead.principal, setup.discussion.id, "summary.md")
    meta = closed.metadata
    assert meta["status"] == "closed"
    assert meta["completedAt"] == meta["closedAt"] == iso(clock.now())
    async with hub.store.read() as tx:
        events = await hub.ctx.events.query(tx, subject=f"channel:{setup.discussion.id}")
    states = [(e.type, e.payload) for e in events if e.type.startswith("discussion.")]
    assert [t for t, _ in states] == ["discussion.completed", "discussion.closed"]
    assert states[0][1]["completedAt"] == meta["completedAt"]
    assert states[1][1]["closedAt"] == meta["closedAt"]
    assert all(e.actor == "lead" for e in events if e.type.startswith("discussion."))


async def test_the_kickoff_names_the_callback_as_each_surface_calls_it(
    hub: Hub, setup: Setup
) -> None:
    kickoff = (await messages(hub, setup.discussion.id))[0].content
    channel_id = setup.discussion.id
    assert "call the tool: discuss_callback" in kickoff
    assert f"parley discuss callback {channel_id} <summary-path>" in kickoff
    assert f"POST /v1/channels/{channel_id}/callback" in kickoff
    # Each name is real: the tool, the CLI command and the REST route exist.
    assert discuss_callback.name == "discuss_callback"
    assert "callback" in [c.name for c in discuss_app.registered_commands]
    paths = create_app(hub=hub).openapi()["paths"]
    assert "post" in paths["/v1/channels/{channel_id}/callback"]


async def test_over_mcp_the_session_is_that_of_the_latest_turn(
    hub: Hub, setup: Setup, clock: FakeClock
) -> None:
    """An MCP call has no turn of its own: it comes from the session of the caller's latest
    turn. After a turn in the group, naming the discussion is not enough."""
    lead = setup.lead.principal

    async def turn_in(tx: Tx, channel_id: str) -> None:
        now = clock.now()
        tx.insert(
            "pending_turns",
            PendingTurn(
                id=new_ulid(),
                agent_id="lead",
                channel_id=channel_id,
                task_id=None,
                round=1,
                prompt={},
                deadline=now + timedelta(seconds=60),
                status="answered",
                created=now,
            ),
        )

    await hub.store.write(lambda tx: turn_in(tx, setup.group))
    await session_id(hub, lead, setup.group)
    over_mcp = ToolCall(hub, lead)
    args = {"summaryPath": "summary.md", "discussion_id": setup.discussion.id}
    with pytest.raises(PermissionDenied) as caught:
        await discuss_callback.run(over_mcp, args)
    assert caught.value.code == "not_initiator_session"
    clock.advance(1)
    await hub.store.write(lambda tx: turn_in(tx, setup.discussion.id))
    result = await discuss_callback.run(over_mcp, {"summaryPath": "summary.md"})
    assert result["discussion"]["status"] == "closed"
