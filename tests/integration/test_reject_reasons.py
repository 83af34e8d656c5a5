"""C10 reason codes: one event gives one code on every path (an abandoned call and the commit
check), ``publish_failed`` is recorded for a reply the channel cannot hold, and the codes the
docs list are exactly the ones the hub records."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.config import Settings
from parley.core.channels import REJECT_REASONS
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import (
    Gate,
    as_another_hub,
    invocations,
    messages,
    within,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "supersede.md"


@pytest.mark.parametrize("signalled", [True, False], ids=["cancel-path", "commit-check"])
async def test_a_discussion_closed_by_its_callback_refuses_the_late_reply_as_cancelled(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    tmp_path: Path,
    signalled: bool,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "summary.md").write_text("done")
    lead = await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(workspace))
    gate = Gate()

    async def lead_reply(turn: Turn) -> str:
        await gate.wait()
        return "a reply to a closed discussion"

    runtimes.set("lead", ScriptedRuntime(lead_reply))
    assert lead.principal.work_channel_id is not None
    channel = await hub.discussions.create_private_channel(
        lead.principal, "solo", [], lead.principal.work_channel_id, "Think it over"
    )
    [task] = await hub.tasks.of_channel(operator, channel.id)
    await within(gate.entered.wait(), "lead's turn")
    with contextlib.nullcontext() if signalled else as_another_hub(hub):
        await hub.discussions.callback(lead.principal, channel.id, "summary.md")
    gate.release.set()
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, task.id)
    assert task.end_reason == "closed"
    trace = await invocations(hub, task.id)
    assert [(i.outcome, i.reason) for i in trace] == [("rejected", "cancelled")]


@pytest.mark.parametrize("reply", ["oversize", "unstorable"])
async def test_a_reply_the_channel_cannot_hold_is_publish_failed(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    settings: Settings,
    reply: str,
) -> None:
    text = "x" * (settings.message_max_bytes + 1) if reply == "oversize" else "bad \x00 byte"
    await make_agent("alpha", runtime={"kind": "scripted"})
    runtimes.set("alpha", ScriptedRuntime(lambda _turn: text))
    channel = await hub.channels.create(operator, ChannelSpec(name="g", members=["alpha"]))
    posted = await hub.channels.post(operator, channel.id, "go")
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert (task.end_reason, task.failed_member) == ("failed", "alpha")
    assert task.error is not None and task.error.startswith("publish_failed: the reply")
    trace = await invocations(hub, task.id)
    assert [(i.outcome, i.reason) for i in trace] == [("rejected", "publish_failed")]
    assert [m.content for m in await messages(hub, channel.id)] == ["go"]


def test_the_documented_reason_codes_are_the_recorded_ones() -> None:
    table = DOCS.read_text().split("## Reason codes", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)`", table, flags=re.M)
    assert tuple(documented) == REJECT_REASONS
