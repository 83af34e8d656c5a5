"""End-to-end flows of group discussions and discussion channels on the service layer."""

from __future__ import annotations

from pathlib import Path

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent


async def test_group_rounds_make_n_times_r_calls(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    calls: list[tuple[str, int | None]] = []

    def reply(turn: Turn) -> str:
        calls.append((turn.agent.id, turn.round))
        return f"{turn.agent.id} speaks in round {turn.round}"

    for name in ("alpha", "beta", "gamma"):
        await make_agent(name, runtime={"kind": "scripted"})
        runtimes.set(name, ScriptedRuntime(reply))
    channel = await hub.channels.create(
        operator,
        ChannelSpec(name="g", members=["alpha", "beta", "gamma", "beta"], discussion_rounds=3),
    )
    posted = await hub.channels.post(operator, channel.id, "discuss the queue")
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert task.end_reason == "max_rounds"
    assert task.members == ["alpha", "beta", "gamma"]
    assert len(calls) == 9
    assert calls[:3] == [("alpha", 1), ("beta", 1), ("gamma", 1)]
    msgs = await hub.channels.messages(operator, channel.id)
    assert msgs[0].sender_id == "operator"
    assert len(msgs) == 10


async def test_discussion_channel_callback_wakes_origin(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    lead = await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(workspace))
    await make_agent("rev", runtime={"kind": "scripted"}, accepts_channels_from=["lead"])
    woken: list[str] = []

    def lead_reply(turn: Turn) -> str:
        if turn.channel_id == lead.principal.work_channel_id:
            woken.append(turn.prompt.user_text())
            return "Read the summary; continuing."
        return "Proposal: one queue. [[DISCUSSION_DONE]]"

    runtimes.set("lead", ScriptedRuntime(lead_reply))
    runtimes.set("rev", ScriptedRuntime(lambda t: "Agreed. [[DISCUSSION_DONE]]"))
    channel = await hub.discussions.create_private_channel(
        lead.principal, "design", ["rev"], lead.principal.work_channel_id, "Pick a queue design"
    )
    await hub.tasks.wait_idle()
    msgs = await hub.channels.messages(operator, channel.id)
    assert msgs[0].sender_kind == "moderator" and "[Discussion Started]" in msgs[0].content
    assert "[[DISCUSSION_DONE]]" not in "".join(m.content for m in msgs)
    (workspace / "summary.md").write_text("one queue")
    closed = await hub.discussions.callback(lead.principal, channel.id, "summary.md")
    assert closed.metadata["status"] == "closed"
    await hub.tasks.wait_idle()
    assert len(woken) == 1
    assert "summary.md" in woken[0]
