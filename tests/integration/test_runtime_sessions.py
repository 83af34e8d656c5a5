"""A command-line agent's own session (Claude Code's session id) is kept on its logical session
and passed back on the next turn, so the agent resumes instead of starting over (W1, W9)."""

from __future__ import annotations

import sys
from pathlib import Path

from parley.adapters.runtimes.command import CLAUDE_SESSION_KEY
from parley.service.hub import Hub
from tests.conftest import MakeAgent

FAKE_CLAUDE = str(Path(__file__).parents[1] / "fakes" / "fake_claude.py")


async def _session_state(hub: Hub, agent_id: str, channel_id: str) -> dict[str, object]:
    async with hub.store.read() as tx:
        session = await tx.session_for(agent_id, channel_id)
    assert session is not None
    return session.runtime_state


async def test_claude_session_id_is_resumed_on_the_next_turn(
    hub: Hub, operator, make_agent: MakeAgent
) -> None:
    runtime = {
        "kind": "command",
        "protocol": "claude-stream-json",
        "argv": [sys.executable, FAKE_CLAUDE, "reply"],
    }
    coder = await make_agent("coder", runtime=runtime)
    work = coder.principal.work_channel_id
    assert work is not None
    await hub.channels.post(operator, work, "first task")
    await hub.tasks.wait_idle()
    first = await _session_state(hub, "coder", work)
    session_id = first[CLAUDE_SESSION_KEY]
    assert session_id
    await hub.channels.post(operator, work, "second task")
    await hub.tasks.wait_idle()
    # The fake keeps the session id only when it was started with --resume=<id>.
    assert await _session_state(hub, "coder", work) == {CLAUDE_SESSION_KEY: session_id}
    replies = [m for m in await hub.channels.messages(operator, work) if m.sender_id == "coder"]
    assert [r.content for r in replies][-1].startswith("heard:")
