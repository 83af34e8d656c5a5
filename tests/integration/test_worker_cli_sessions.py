"""A CLI worker's own session (Claude Code's session id, Codex's thread id) is kept from the
moment the CLI names it, so a first turn cut by a takeover or by the hub stopping is resumed by
the next turn instead of starting over (W1 RuntimeSubSession, W5, W9).

The fakes print the real event shapes: Codex's ``thread.started`` and Claude Code's
``system``/``init`` come first, and the turn is cut before any result.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes.claude_code import CLAUDE_SESSION_KEY
from parley.adapters.runtimes.codex import CODEX_THREAD_KEY
from parley.bootstrap import build_hub, default_runtimes
from parley.config import Settings
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.workers.records import StartSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.processes import wait_gone
from tests.fakes.ready import ReadyListener
from tests.integration.test_worker_takeover_cli import frames_heard

FAKES = Path(__file__).resolve().parents[1] / "fakes"
FAKE_CODEX = FAKES / "fake_codex.py"
FAKE_CLAUDE = str(FAKES / "fake_claude.py")
INSTRUCTION = "Keep the public API; rename only the internals."
TASK = "Refactor the parser module fake-mode=hang-new"
"""The fake Codex hangs in a new thread (until the turn is cut) and replies in a resumed one."""


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


def codex_runtime(tmp_path: Path, ready: ReadyListener) -> dict[str, Any]:
    """The ``codex`` preset running the fake Codex, whose threads are files in ``tmp_path``
    (``resume`` of a thread it never started fails as Codex's does)."""
    executable = tmp_path / "codex-fake"
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CODEX}" "$@"\n')
    executable.chmod(0o755)
    threads = tmp_path / "threads"
    threads.mkdir()
    env = {
        "FAKE_READY_PORT": str(ready.port),
        "FAKE_CODEX_HOME": str(threads),
        "FAKE_CODEX_LOGGED_IN": "1",
        "CODEX_API_KEY": "",
        "OPENAI_API_KEY": "",
    }
    return {"kind": "command", "preset": "codex", "executable": str(executable), "env": env}


async def codex_turn(ready: ReadyListener) -> tuple[int, str, str]:
    """The next ``codex exec`` run the fake reports: (pid, thread id, new|resumed)."""
    while (line := (await ready.next_line()).split())[0] == "login":
        continue
    _, pid, thread, how = line
    return int(pid), thread, how


async def runtime_state(hub: Hub, session_id: str) -> dict[str, Any]:
    async with hub.store.read() as tx:
        logical = await tx.get("sessions", session_id)
    assert logical is not None
    state: dict[str, Any] = logical.runtime_state
    return state


async def test_a_codex_worker_taken_over_in_its_first_turn_resumes_its_thread(
    hub: Hub, operator: Principal, make_agent: MakeAgent, ready: ReadyListener, tmp_path: Path
) -> None:
    await make_agent("coder", runtime=codex_runtime(tmp_path, ready))
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt=TASK))
    pid, thread, how = await codex_turn(ready)  # thread.started is out; no turn.completed
    assert how == "new"

    outcome = await hub.workers.takeover(operator, worker.id, INSTRUCTION, timeout_s=30)
    assert outcome.interrupted and not outcome.timed_out
    await wait_gone(pid)
    # The takeover's turn continues the cut turn's thread: `codex exec ... resume <thread>`.
    _, resumed, how = await codex_turn(ready)
    assert (resumed, how) == (thread, "resumed")
    await hub.tasks.wait_idle()
    assert await runtime_state(hub, worker.session_id) == {CODEX_THREAD_KEY: thread}
    assert (await hub.workers.get(operator, worker.id)).state == "idle"


class Restartable:
    """Hubs built one after the other on the same store, as a restart does."""

    def __init__(self, settings: Settings, clock: FakeClock) -> None:
        self.settings = settings
        self.clock = clock
        self.running: list[Hub] = []
        self.token: str | None = None

    async def start(self) -> tuple[Hub, Principal]:
        hub = build_hub(
            self.settings, clock=self.clock, runtimes=StaticRuntimes(fallback=default_runtimes())
        )
        await hub.start(background=False)
        self.running.append(hub)
        # The operator token is handed out by the first start only.
        self.token = self.token or hub.operator_token
        assert self.token is not None
        return hub, await hub.identity.authenticate(self.token)

    async def stop(self, hub: Hub) -> None:
        self.running.remove(hub)
        await hub.stop()


@pytest.fixture
async def hubs(settings: Settings, clock: FakeClock) -> AsyncIterator[Restartable]:
    hubs = Restartable(settings, clock)
    try:
        yield hubs
    finally:
        for hub in list(hubs.running):
            await hubs.stop(hub)


def kept_states(hub: Hub) -> asyncio.Queue[dict[str, Any]]:
    """The runtime states ``hub`` writes, as each write commits (the task loop's seam)."""
    written: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def after_state_saved(session_id: str, state: dict[str, Any]) -> None:
        await written.put(state)

    hub.tasks.after_state_saved = after_state_saved
    return written


async def test_a_codex_thread_is_stored_while_the_first_turn_runs_and_resumed_after_a_restart(
    hubs: Restartable, ready: ReadyListener, tmp_path: Path
) -> None:
    first, operator = await hubs.start()
    await first.identity.create_agent(
        operator, AgentSpec(id="coder", runtime=codex_runtime(tmp_path, ready))
    )
    written = kept_states(first)
    worker = await first.workers.start(operator, StartSpec(agent_id="coder", prompt=TASK))
    _, thread, how = await codex_turn(ready)
    assert how == "new"
    # Stored as soon as Codex named it, while the turn still runs: a hub killed now keeps it.
    assert await asyncio.wait_for(written.get(), 30) == {CODEX_THREAD_KEY: thread}
    assert await runtime_state(first, worker.session_id) == {CODEX_THREAD_KEY: thread}
    assert (await first.workers.get(operator, worker.id)).state == "running"
    await hubs.stop(first)

    second, operator = await hubs.start()
    assert (await second.workers.get(operator, worker.id)).state == "interrupted"
    await second.workers.resume(operator, worker.id)
    _, resumed, how = await codex_turn(ready)
    assert (resumed, how) == (thread, "resumed")
    await second.tasks.wait_idle()
    assert (await second.workers.get(operator, worker.id)).state == "idle"
    assert await runtime_state(second, worker.session_id) == {CODEX_THREAD_KEY: thread}


async def test_a_claude_code_worker_cut_by_a_hub_stop_in_its_first_turn_resumes_its_session(
    hubs: Restartable, ready: ReadyListener, tmp_path: Path
) -> None:
    home = tmp_path / "claude-sessions"
    home.mkdir()
    runtime = {
        "kind": "command",
        "protocol": "claude-stream-json",
        "argv": [sys.executable, FAKE_CLAUDE, "slow"],
        "env": {"FAKE_READY_PORT": str(ready.port), "FAKE_CLAUDE_HOME": str(home)},
    }
    first, operator = await hubs.start()
    await first.identity.create_agent(operator, AgentSpec(id="coder", runtime=runtime))
    written = kept_states(first)
    worker = await first.workers.start(
        operator, StartSpec(agent_id="coder", prompt="Refactor the parser module")
    )
    # Mid-stream: the fake printed its init and a partial assistant message, and waits.
    kind, pid, number, session = (await ready.next_line()).split()
    assert (kind, number) == ("turn", "1")
    assert await asyncio.wait_for(written.get(), 30) == {CLAUDE_SESSION_KEY: session}
    await hubs.stop(first)
    await wait_gone(int(pid))

    second, operator = await hubs.start()
    await second.workers.resume(operator, worker.id)
    # A new process, started with --resume=<session>, goes on with the same conversation.
    kind, resumed_pid, number, resumed = (await ready.next_line()).split()
    assert (kind, number, resumed) == ("turn", "1", session)
    assert resumed_pid != pid
    await ready.tell("go")
    await second.tasks.wait_idle()
    heard = frames_heard(home, session)
    assert len(heard) == 2
    assert "Refactor the parser module" in heard[0]
    assert "[RESUME]" in heard[1]
    assert (await second.workers.get(operator, worker.id)).state == "idle"
    assert await runtime_state(second, worker.session_id) == {CLAUDE_SESSION_KEY: session}
