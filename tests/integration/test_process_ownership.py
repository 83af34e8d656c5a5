"""Every process a worker's turn starts is owned, and ended on every path.

The fake Claude Code and Codex start a tool in a session of their own at the start of each turn,
as Claude Code runs its Bash tool (``tests/fakes/fake_tool.py``), and note its pid: stopping the
CLI's process group does not reach it. After a cancel, a crash, a timeout, a takeover, a
release and a hub's stop, no process of the worker remains (checked by pid); the records of a
dead hub's processes are ended by the next hub (both backends).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from parley.adapters.runtimes.ownership import OWNER
from parley.bootstrap import build_hub, default_runtimes
from parley.config import Settings
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.core.processes import OWNER_ENV, RuntimeProcess
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.workers.processes import ORPHANS_ENDED
from parley.service.workers.records import StartSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.processes import is_gone, wait_gone
from tests.fakes.ready import ReadyListener

FAKES = Path(__file__).resolve().parents[1] / "fakes"
FAKE_CLAUDE = str(FAKES / "fake_claude.py")
FAKE_CODEX = str(FAKES / "fake_codex.py")


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


class Tools:
    """The pids the fake CLIs note: each turn's CLI and the tool it started in its own session."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pairs(self) -> list[tuple[int, int]]:
        if not self.path.exists():
            return []
        return [
            (int(cli), int(tool))
            for cli, tool in (line.split() for line in self.path.read_text().splitlines())
        ]

    def all(self) -> list[int]:
        return [pid for pair in self.pairs() for pid in pair]


@pytest.fixture
def tools(tmp_path: Path) -> Tools:
    return Tools(tmp_path / "tool-pids")


def claude(mode: str, ready: ReadyListener, tools: Tools) -> dict[str, Any]:
    return {
        "kind": "command",
        "protocol": "claude-stream-json",
        "argv": [sys.executable, FAKE_CLAUDE, mode],
        "env": {"FAKE_READY_PORT": str(ready.port), "FAKE_TOOL_PIDS": str(tools.path)},
        "kill_grace_s": 1,
    }


def codex(tmp_path: Path, ready: ReadyListener, tools: Tools, **extra: Any) -> dict[str, Any]:
    executable = tmp_path / "codex-fake"
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CODEX}" "$@"\n')
    executable.chmod(0o755)
    threads = tmp_path / "threads"
    threads.mkdir(exist_ok=True)
    env = {
        "FAKE_READY_PORT": str(ready.port),
        "FAKE_CODEX_HOME": str(threads),
        "FAKE_CODEX_LOGGED_IN": "1",
        "FAKE_TOOL_PIDS": str(tools.path),
        "CODEX_API_KEY": "",
        "OPENAI_API_KEY": "",
    }
    return {
        "kind": "command",
        "preset": "codex",
        "executable": str(executable),
        "env": env,
        "kill_grace_s": 1,
        **extra,
    }


async def next_turn(ready: ReadyListener) -> int:
    """The pid of the next turn a fake CLI reports (its tool is started and noted by then)."""
    while (line := (await ready.next_line()).split())[0] != "turn":
        continue
    return int(line[1])


async def test_a_cancelled_worker_leaves_no_process_behind(
    hub: Hub, operator: Principal, make_agent: MakeAgent, ready: ReadyListener, tools: Tools
) -> None:
    await make_agent("coder", runtime=claude("slow", ready, tools))
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Refactor"))
    cli = await next_turn(ready)
    [(noted, tool)] = tools.pairs()
    assert noted == cli and not is_gone(tool)

    await hub.workers.cancel(operator, worker.id)
    # Claude Code answers the interrupt and would be kept for a next turn; a killed worker
    # has none, so its process and the tool it started go with it, before the cancel returns.
    assert [pid for pid in (cli, tool) if not is_gone(pid)] == []


async def test_a_crashed_claude_leaves_no_tool_running(
    hub: Hub, operator: Principal, make_agent: MakeAgent, ready: ReadyListener, tools: Tools
) -> None:
    await make_agent("coder", runtime=claude("crash", ready, tools))
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Refactor"))
    await hub.tasks.wait_idle()
    assert (await hub.workers.get(operator, worker.id)).state == "idle"
    [(cli, tool)] = tools.pairs()
    # The tool runs in a session of its own: only its owner, not the CLI's group, reaches it.
    await wait_gone(cli, tool)


async def test_a_turn_that_times_out_leaves_no_process_behind(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    ready: ReadyListener,
    tools: Tools,
    tmp_path: Path,
) -> None:
    await make_agent("coder", runtime=codex(tmp_path, ready, tools, timeout_s=1))
    await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Port fake-mode=hang"))
    cli = await next_turn(ready)
    await hub.tasks.wait_idle()
    [(noted, tool)] = tools.pairs()
    assert noted == cli
    await wait_gone(cli, tool)


async def test_a_takeover_leaves_no_process_of_the_cut_turn(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    ready: ReadyListener,
    tools: Tools,
    tmp_path: Path,
) -> None:
    await make_agent("coder", runtime=codex(tmp_path, ready, tools))
    prompt = "Port the parser fake-mode=hang-new"
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt=prompt))
    cut = await next_turn(ready)
    outcome = await hub.workers.takeover(operator, worker.id, "Keep the API.", timeout_s=30)
    assert outcome.interrupted
    await next_turn(ready)  # the takeover's turn resumes the thread and replies
    await hub.tasks.wait_idle()
    assert cut in [cli for cli, _ in tools.pairs()] and len(tools.pairs()) == 2
    await wait_gone(*tools.all())


async def test_a_released_worker_leaves_no_process_behind(
    hub: Hub, operator: Principal, make_agent: MakeAgent, ready: ReadyListener, tools: Tools
) -> None:
    await make_agent("coder", runtime=claude("reply", ready, tools))
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Refactor"))
    cli = await next_turn(ready)
    await hub.tasks.wait_idle()
    assert (await hub.workers.get(operator, worker.id)).state == "idle"
    [(_, tool)] = tools.pairs()
    # Idle: Claude Code is kept for the worker's next turn, with what it started.
    assert not is_gone(cli) and not is_gone(tool)

    record = await until_recorded(hub)
    await hub.workers.release(operator, worker.id)
    # Gone before the release returns, as after a cancel.
    assert [pid for pid in (record.pid, cli, tool) if not is_gone(pid)] == []
    await until_forgotten(hub)


async def until_recorded(hub: Hub) -> RuntimeProcess:
    """The one process record of ``hub`` (written in the background as the process starts)."""
    deadline = time.monotonic() + 10
    while True:
        async with hub.store.read() as tx:
            rows: list[RuntimeProcess] = await tx.select("runtime_processes")
        if rows:
            [record] = rows
            return record
        assert time.monotonic() < deadline, "the process was not recorded"
        await asyncio.sleep(0.02)


async def until_forgotten(hub: Hub) -> None:
    deadline = time.monotonic() + 10
    while True:
        async with hub.store.read() as tx:
            if not await tx.select("runtime_processes"):
                return
        assert time.monotonic() < deadline, "the ended process is still recorded"
        await asyncio.sleep(0.02)


async def test_a_stopping_hub_leaves_no_process_behind(
    settings: Settings, clock: FakeClock, ready: ReadyListener, tools: Tools
) -> None:
    """What SIGTERM does to ``parley serve``: the hub stops, and with it every process."""
    hub = build_hub(settings, clock=clock, runtimes=StaticRuntimes(fallback=default_runtimes()))
    await hub.start(background=False)
    try:
        assert hub.operator_token is not None
        operator = await hub.identity.authenticate(hub.operator_token)
        await hub.identity.create_agent(
            operator, AgentSpec(id="coder", runtime=claude("slow", ready, tools))
        )
        await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Refactor"))
        cli = await next_turn(ready)
        supervisor = psutil.Process(cli).ppid()
        record = await until_recorded(hub)
        assert (record.pid, record.agent_pid, record.hub_id) == (supervisor, cli, hub.id)
        assert record.start_time == psutil.Process(supervisor).create_time()
    finally:
        await hub.stop()
    await wait_gone(supervisor, *tools.all())


# -- a dead hub's records ---------------------------------------------------------------------


def start_tree(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process that starts a tool in a session of its own and waits: a supervisor whose hub
    died and that was itself stopped before it could end its tree."""
    code = (
        "import subprocess, sys, threading\n"
        "t = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "print(t.pid, flush=True)\n"
        "threading.Event().wait()  # until it is killed\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ, **env}
    )


def record_of(proc: subprocess.Popen[bytes], hub_id: str) -> RuntimeProcess:
    return RuntimeProcess(
        id=f"p-{proc.pid}",
        hub_id=hub_id,
        host=OWNER.host,
        pid=proc.pid,
        pgid=proc.pid,
        start_time=psutil.Process(proc.pid).create_time(),
        agent_pid=proc.pid,
        command="claude",
        created=datetime.now(UTC),
    )


async def test_a_hub_ends_the_processes_a_dead_hub_left(hub: Hub) -> None:
    dead = new_ulid()  # a hub that is gone; unique, so no other run's process carries it
    recorded = start_tree({})
    marked = start_tree({OWNER_ENV: dead})  # found by its environment, with no record
    reused = start_tree({})  # a record whose pid was given to another process since
    try:
        assert recorded.stdout and marked.stdout and reused.stdout
        recorded_tool = int(recorded.stdout.readline())
        marked_tool = int(marked.stdout.readline())
        reused_tool = int(reused.stdout.readline())
        stale = record_of(reused, dead).model_copy(update={"id": "p-stale", "start_time": 1.0})

        async def seed(tx: Tx) -> None:
            tx.insert("runtime_processes", record_of(recorded, dead))
            tx.insert("runtime_processes", stale)
            tx.insert("runtime_processes", record_of(reused, hub.id))  # this hub's own

        await hub.store.write(seed)
        # What a hub does at start, and in a cluster the lease sweep of every hub.
        await hub.sweep_leases()
        await wait_gone(recorded.pid, recorded_tool, marked.pid, marked_tool)
        assert not is_gone(reused.pid)

        async with hub.store.read() as tx:
            left: list[RuntimeProcess] = await tx.select("runtime_processes")
            e = tx.table("events").c
            [event] = await tx.select("events", e.type == ORPHANS_ENDED)
        assert [r.hub_id for r in left] == [hub.id]
        assert event.subject == f"hub:{dead}"
        assert event.payload["records"] == 2
        ended = {recorded.pid, recorded_tool, marked.pid, marked_tool}
        assert set(event.payload["ended_pids"]) == ended
        # Nothing left: the next sweep ends nothing and says nothing.
        assert await hub.processes.end_orphans() == []
    finally:
        for proc in (recorded, marked, reused):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError, UnboundLocalError):
            os.kill(reused_tool, signal.SIGKILL)  # the one tree this test leaves alive


async def test_records_of_an_earlier_boot_of_this_machine_are_cleared(hub: Hub) -> None:
    # The machine went down with its hub (a power cut): the records name processes that ended
    # with that boot. A hub of the next boot deletes them, and leaves another machine's.
    name, _, boot = OWNER.host.partition("/")
    assert boot, "this machine has no boot id"
    dead = new_ulid()
    earlier = f"{name}/{'0' if boot[0] != '0' else '1'}{boot[1:]}"
    unused_pid = 2**22 + 7  # above any pid the system gives: nothing to end here

    def record(record_id: str, host: str) -> RuntimeProcess:
        return RuntimeProcess(
            id=record_id,
            hub_id=dead,
            host=host,
            pid=unused_pid,
            pgid=unused_pid,
            start_time=1.0,
            agent_pid=unused_pid,
            command="claude",
            created=datetime.now(UTC),
        )

    async def seed(tx: Tx) -> None:
        tx.insert("runtime_processes", record("p-earlier-boot", earlier))
        tx.insert("runtime_processes", record("p-elsewhere", f"elsewhere-{name}/{boot}"))

    await hub.store.write(seed)
    await hub.sweep_leases()
    async with hub.store.read() as tx:
        left: list[RuntimeProcess] = await tx.select("runtime_processes")
        e = tx.table("events").c
        [event] = await tx.select("events", e.type == ORPHANS_ENDED)
    assert [r.id for r in left] == ["p-elsewhere"]
    assert event.subject == f"hub:{dead}"
    assert (event.payload["records"], event.payload["ended_pids"]) == (1, [])
