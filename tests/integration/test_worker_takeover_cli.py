"""Takeover and cancel of workers whose turns run in real command-line processes (W4, W5, W9).

The takeover test drives a worker whose agent is the fake Claude Code in bidirectional
stream-json mode, kept alive per logical session, caught mid-stream (a partial assistant message
is out and the fake waits): the takeover interrupts that turn with a control request, the same
process answers it and keeps the session, and the envelope is the next user frame it reads. The
cancel test stops a worker whose ``text``-protocol command blocks, and checks that its whole
process group is gone.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from parley.adapters.runtimes.claude_code import CLAUDE_SESSION_KEY
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.workers.records import StartSpec
from tests.conftest import MakeAgent
from tests.fakes.fake_claude import COST_PER_TURN
from tests.fakes.processes import is_gone, wait_gone
from tests.fakes.ready import ReadyListener

FAKES = Path(__file__).resolve().parents[1] / "fakes"
FAKE_CLAUDE = str(FAKES / "fake_claude.py")
AGENT_COMMAND = str(FAKES / "agent_command.py")
INSTRUCTION = "Keep the public API; rename only the internals."


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


async def events_of(hub: Hub, subject: str) -> list[str]:
    async with hub.store.read() as tx:
        e = tx.table("events").c
        rows = await tx.select("events", e.subject == subject, order_by=[e.id])
    return [r.type for r in rows]


def frames_heard(home: Path, session: str) -> list[str]:
    """The user frames the fake Claude Code read in ``session``, in order (its own record)."""
    lines = (home / session).read_text().splitlines()
    return [json.loads(line)["user"] for line in lines]


async def test_takeover_interrupts_a_claude_code_turn_mid_stream_in_the_same_process(
    hub: Hub, operator: Principal, make_agent: MakeAgent, ready: ReadyListener, tmp_path: Path
) -> None:
    home = tmp_path / "claude-sessions"
    home.mkdir()
    runtime = {
        "kind": "command",
        "protocol": "claude-stream-json",
        "argv": [sys.executable, FAKE_CLAUDE, "slow"],
        "env": {"FAKE_READY_PORT": str(ready.port), "FAKE_CLAUDE_HOME": str(home)},
    }
    await make_agent("coder", runtime=runtime)
    worker = await hub.workers.start(
        operator, StartSpec(agent_id="coder", prompt="Refactor the parser module")
    )
    # Mid-stream: the fake printed its init and a partial assistant message, and now waits.
    kind, pid, number, session = (await ready.next_line()).split()
    assert (kind, number) == ("turn", "1")
    first_task = (await hub.workers.get(operator, worker.id)).task_id
    assert first_task is not None

    outcome = await hub.workers.takeover(operator, worker.id, INSTRUCTION, timeout_s=30)
    assert outcome.interrupted and not outcome.timed_out
    assert outcome.task_id is not None and outcome.task_id != first_task
    assert outcome.worker.pending_takeover_message_id == outcome.message_id

    # The fake got the interrupt control request of the cut turn and honoured it...
    (call,) = await hub.tasks.invocations(operator, first_task)
    assert await ready.next_line() == f"interrupted parley-{call.id}"
    assert (call.outcome, call.reason) == ("rejected", "cancelled")
    assert call.timings["runtime_interrupt_ms"] >= 0
    # ...and the same process, in the same Claude Code session, took the takeover's turn.
    assert (await ready.next_line()).split() == ["turn", pid, "2", session]
    await ready.tell("go")  # the barrier the slow fake waits on to finish that turn
    await hub.tasks.wait_idle()

    heard = frames_heard(home, session)
    assert len(heard) == 2
    assert "Refactor the parser module" in heard[0]
    envelope = heard[1]
    assert "[TAKEOVER]" in envelope
    assert "This is a takeover of an interrupted turn, not a new task" in envelope
    assert INSTRUCTION in envelope
    assert "Refactor the parser module" in envelope  # what the cut turn was working on
    async with hub.store.read() as tx:
        logical = await tx.get("sessions", worker.session_id)
    assert logical.runtime_state == {CLAUDE_SESSION_KEY: session}
    assert not is_gone(int(pid))  # kept alive for the session's next turn

    after = await hub.workers.get(operator, worker.id)
    assert after.state == "idle"
    assert after.pending_takeover_message_id is None
    assert after.task_id == outcome.task_id
    types = await events_of(hub, f"worker:{worker.id}")
    assert "system.takeover_initiated" in types and "system.takeover_consumed" in types
    initiated = types.index("system.takeover_initiated")
    assert initiated < types.index("worker.interrupted", initiated)
    assert types.index("worker.interrupted", initiated) < types.index("system.takeover_consumed")
    assert types[-1] == "worker.idle"
    mail = await hub.mail.get(operator, outcome.message_id)
    assert mail.kind == "takeover" and mail.consumed_at is not None
    # The cut turn is booked what its interrupted result states; the takeover's turn only its
    # own cost (the process restates a running total).
    async with hub.store.read() as tx:
        u = tx.table("turn_usage").c
        booked = await tx.select("turn_usage", u.agent_id == "coder", order_by=[u.created, u.id])
    assert len(booked) == 2 and booked[0].id == call.id
    assert [r.cost_usd for r in booked] == [pytest.approx(COST_PER_TURN)] * 2


async def test_cancel_kills_the_process_group_of_a_blocked_text_command(
    hub: Hub, operator: Principal, make_agent: MakeAgent, ready: ReadyListener
) -> None:
    runtime = {
        "kind": "command",
        "argv": [sys.executable, AGENT_COMMAND, "hang"],
        "env": {"FAKE_READY_PORT": str(ready.port)},
        "kill_grace_s": 0.5,
    }
    await make_agent("builder", runtime=runtime)
    worker = await hub.workers.start(
        operator, StartSpec(agent_id="builder", prompt="Build the release")
    )
    # The command read its prompt, started a grandchild in its process group, and blocks.
    pid, grandchild = (int(p) for p in (await ready.next_line()).split())
    assert (await hub.workers.get(operator, worker.id)).state == "running"

    cancelled = await hub.workers.cancel(operator, worker.id, reason="wrong branch")
    assert [(w.id, w.state) for w in cancelled] == [(worker.id, "killed")]
    # The command itself was reaped before the cancel returned.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # Its grandchild, reparented elsewhere, got the group's signal too.
    await wait_gone(grandchild)
    await hub.tasks.wait_idle()
    after = await hub.workers.get(operator, worker.id)
    assert after.state == "killed" and after.end_reason == "wrong branch"
    (task,) = await hub.tasks.of_channel(operator, worker.channel_id)
    assert task.status == "finished" and task.end_reason == "cancelled"
