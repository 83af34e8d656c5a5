"""A running task keeps each prompt's transcript within the character budget (C5, Q3): a channel
full of long messages gives a bounded prompt that still ends with the latest message and keeps
the task section."""

from __future__ import annotations

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core import discussion as d
from parley.core.identity import Principal
from parley.core.ports import Tx
from parley.core.runtime import NO_REPLY
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import invocations, transcript_of


async def test_a_channel_of_long_messages_gives_a_bounded_prompt(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await make_agent("alpha", runtime={"kind": "scripted"})
    runtime = ScriptedRuntime(lambda _turn: NO_REPLY)
    runtimes.set("alpha", runtime)
    channel = await hub.channels.create(
        operator, ChannelSpec(name="g", members=["alpha"], discussion_rounds=1)
    )

    async def fill(tx: Tx) -> None:
        for i in range(60):
            await hub.channels.append(
                tx,
                channel.id,
                sender_id="operator",
                sender_kind="human",
                content=f"{i} " + "x" * 5000,
            )

    await hub.store.write(fill)
    posted = await hub.channels.post(operator, channel.id, "TASK: summarise the above")
    await hub.tasks.wait_idle()

    [turn] = runtime.turns
    shown = transcript_of(turn)
    assert 0 < len(shown) < 61
    assert shown[-1]["content"] == "TASK: summarise the above"
    assert sum(e.prompt_chars for e in turn.prompt.transcript) <= d.TRANSCRIPT_CHAR_BUDGET
    assert "## User task\nTASK: summarise the above\n" in turn.prompt.user_text()
    [call] = await invocations(hub, posted.task_id or "")
    assert call.prompt_chars == turn.prompt.char_count()
    assert call.prompt_last_id == posted.message.id
