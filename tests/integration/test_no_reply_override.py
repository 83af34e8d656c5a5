"""C8: after the callback every session in the discussion channel is overridden to NO_REPLY, and
a task that still gives turns there skips those sessions without calling their runtime — also
when the task never heard the cancel signal (it runs in another hub process, which the commit
of the callback does not signal)."""

from __future__ import annotations

from pathlib import Path

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.core.runtime import NO_REPLY, Turn
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import Gate, as_another_hub, invocations, within


async def test_a_running_task_skips_sessions_overridden_to_no_reply(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "summary.md").write_text("done")
    lead = await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(workspace))
    await make_agent("rev", runtime={"kind": "scripted"}, accepts_channels_from=["lead"])
    gate = Gate()
    rev_turns: list[Turn] = []

    async def lead_reply(turn: Turn) -> str:
        if turn.channel_id != lead.principal.work_channel_id:
            await gate.wait()
        return NO_REPLY

    def rev_reply(turn: Turn) -> str:
        rev_turns.append(turn)
        return "a reply nobody may see"

    runtimes.set("lead", ScriptedRuntime(lead_reply))
    runtimes.set("rev", ScriptedRuntime(rev_reply))
    assert lead.principal.work_channel_id is not None
    channel = await hub.discussions.create_private_channel(
        lead.principal, "design", ["rev"], lead.principal.work_channel_id, "Pick a queue"
    )
    [task] = await hub.tasks.of_channel(operator, channel.id)
    await within(gate.entered.wait(), "lead's first turn")

    # The callback lands while lead's turn runs, committed as another hub would: the flag is
    # stored, but no in-process cancel event reaches this task.
    with as_another_hub(hub):
        await hub.discussions.callback(lead.principal, channel.id, "summary.md")
    gate.release.set()
    await hub.tasks.wait_idle()

    assert rev_turns == []  # rev's session says NO_REPLY: its runtime is never called
    trace = await invocations(hub, task.id)
    assert [(i.agent_id, i.outcome) for i in trace] == [("lead", "silent")]
