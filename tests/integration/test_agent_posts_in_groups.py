"""Source 003 §4: in a group a newer *user* message supersedes the running discussion; an
agent's post out of turn is kept and read by the next speakers, but it neither supersedes the
discussion nor starts one."""

from __future__ import annotations

from typing import Any

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import (
    Gate,
    invocations,
    last_trigger,
    messages,
    transcript_of,
    within,
)


async def test_an_agents_out_of_turn_post_does_not_supersede_the_discussion(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    gate = Gate()
    beta_turns: list[Turn] = []

    async def alpha(turn: Turn) -> str:
        await gate.wait()
        return "alpha: proposal"

    def beta(turn: Turn) -> str:
        beta_turns.append(turn)
        return "beta: question"

    await make_agent("alpha", runtime={"kind": "scripted"})
    beta_agent = await make_agent("beta", runtime={"kind": "scripted"})
    runtimes.set("alpha", ScriptedRuntime(alpha))
    runtimes.set("beta", ScriptedRuntime(beta))
    spec = ChannelSpec(name="g", members=["alpha", "beta"], discussion_rounds=1)
    channel = await hub.channels.create(operator, spec)
    started = await hub.channels.post(operator, channel.id, "U1: design the queue")
    await within(gate.entered.wait(), "alpha's call")

    r = await api(beta_agent.token).post(
        f"/v1/im/sessions/{channel.id}/messages", json={"content": "beta: a note out of turn"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["task_id"] is None  # it starts nothing
    assert await last_trigger(hub, channel.id) == started.message.id
    gate.release.set()
    await hub.tasks.wait_idle()

    task = await hub.tasks.get(operator, started.task_id or "")
    assert (task.end_reason, task.accepted, task.cancel_requested) == ("max_rounds", 2, False)
    trace = await invocations(hub, task.id)
    assert [(i.agent_id, i.outcome) for i in trace] == [("alpha", "accepted"), ("beta", "accepted")]
    assert [m.content for m in await messages(hub, channel.id)] == [
        "U1: design the queue",
        "beta: a note out of turn",
        "alpha: proposal",
        "beta: question",
    ]
    # The note is context for the next speaker.
    [turn] = beta_turns
    assert "beta: a note out of turn" in [e["content"] for e in transcript_of(turn)]
    assert len(await hub.tasks.of_channel(operator, channel.id)) == 1

    # A user's message still supersedes and starts new rounds.
    newer = await hub.channels.post(operator, channel.id, "U2: design the cache instead")
    assert newer.task_id is not None
    await hub.tasks.wait_idle()
