"""A command-line agent's own session (Claude Code's session id) is kept on its logical session
and passed back on the next turn, so the agent resumes instead of starting over (W1, W9)."""

from __future__ import annotations

import sys
from pathlib import Path

from parley.adapters.runtimes.claude_code import CLAUDE_SESSION_KEY
from parley.core.channels import Task
from parley.core.identity import Principal
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.fakes.ready import ReadyListener

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


AGENT_COMMAND = str(Path(__file__).parents[1] / "fakes" / "agent_command.py")


async def _only_task(hub: Hub, operator: Principal, channel_id: str) -> Task:
    """The channel's latest task, once every task has finished."""
    await hub.tasks.wait_idle()
    tasks = await hub.tasks.of_channel(operator, channel_id)
    return tasks[-1]


async def test_a_failed_command_turn_keeps_its_exit_status_and_stderr(
    hub: Hub, operator, make_agent: MakeAgent
) -> None:
    runtime = {"kind": "command", "argv": [sys.executable, AGENT_COMMAND, "fail"]}
    coder = await make_agent("coder", runtime=runtime)
    work = coder.principal.work_channel_id
    assert work is not None
    await hub.channels.post(operator, work, "do it")
    task = await _only_task(hub, operator, work)
    assert (task.end_reason, task.failed_member) == ("failed", "coder")
    assert task.error is not None
    assert "exit status 3" in task.error and "the model is on fire" in task.error
    (call,) = await hub.tasks.invocations(operator, task.id)
    assert (call.outcome, call.reason) == ("failed", "runtime_error")
    assert call.timings["runtime_exit_code"] == 3.0
    assert "runtime_provider_wait_ms" in call.timings


async def test_a_stale_claude_session_is_dropped_and_the_invocation_says_so(
    hub: Hub, operator, make_agent: MakeAgent, tmp_path: Path
) -> None:
    sessions = tmp_path / "claude-sessions"
    sessions.mkdir()
    runtime = {
        "kind": "command",
        "protocol": "claude-stream-json",
        "keep_alive": False,
        "argv": [sys.executable, FAKE_CLAUDE, "reply"],
        "env": {"FAKE_CLAUDE_HOME": str(sessions)},
    }
    coder = await make_agent("coder", runtime=runtime)
    work = coder.principal.work_channel_id
    assert work is not None
    await hub.channels.post(operator, work, "first task")
    await hub.tasks.wait_idle()
    lost = (await _session_state(hub, "coder", work))[CLAUDE_SESSION_KEY]
    (sessions / str(lost)).unlink()  # Claude Code no longer has it
    await hub.channels.post(operator, work, "second task")
    task = await _only_task(hub, operator, work)
    assert task.end_reason == "replied", task.error
    fresh = (await _session_state(hub, "coder", work))[CLAUDE_SESSION_KEY]
    assert fresh != lost
    (call,) = await hub.tasks.invocations(operator, task.id)
    assert call.timings["runtime_resumed_fresh"] == 1.0


async def test_a_cancelled_turn_records_the_interrupt_and_the_session_goes_on(
    hub: Hub, operator, make_agent: MakeAgent
) -> None:
    async with ReadyListener() as ready:
        runtime = {
            "kind": "command",
            "protocol": "claude-stream-json",
            "argv": [sys.executable, FAKE_CLAUDE, "slow"],
            "env": {"FAKE_READY_PORT": str(ready.port)},
        }
        coder = await make_agent("coder", runtime=runtime)
        work = coder.principal.work_channel_id
        assert work is not None
        posted = await hub.channels.post(operator, work, "first task")
        assert posted.task_id is not None
        _, pid, number, session = (await ready.next_line()).split()
        await hub.tasks.cancel(operator, posted.task_id)
        assert (await ready.next_line()).startswith("interrupted ")
        await hub.tasks.wait_idle()
        (call,) = await hub.tasks.invocations(operator, posted.task_id)
        assert call.outcome == "rejected"
        assert call.timings["runtime_interrupt_ms"] >= 0
        # The same Claude Code process takes the next turn, in the same session.
        await hub.channels.post(operator, work, "second task")
        assert (await ready.next_line()).split() == ["turn", pid, str(int(number) + 1), session]
        await ready.tell("go")
        task = await _only_task(hub, operator, work)
        assert task.end_reason == "replied", task.error
