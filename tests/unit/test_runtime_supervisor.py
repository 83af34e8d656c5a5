"""The supervisor each command-line agent runs under (``parley/adapters/runtimes/supervise.py``):
it reports the agent's pid, exits as the agent did, and ends every process below it, in any
session, when the agent exits or when its lifeline to the hub closes (the hub died)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time

import psutil
import pytest

from parley.adapters.runtimes import child as child_module
from parley.adapters.runtimes.child import ChildProcess
from tests.fakes.processes import is_gone, wait_gone

# Starts a tool in a session of its own, prints its pid, and waits (or exits with status 3).
TREE = (
    "import subprocess, sys, threading\n"
    "t = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "print(t.pid, flush=True)\n"
    "if sys.argv[1] == 'exit':\n"
    "    sys.exit(3)\n"
    "threading.Event().wait()  # until it is killed\n"
)


async def start(mode: str) -> tuple[ChildProcess, list[int]]:
    lines: list[bytes] = []
    child = await ChildProcess.start(
        [sys.executable, "-c", TREE, mode],
        cwd=None,
        env=dict(os.environ),
        kill_grace_s=1,
        on_line=lines.append,
        keep_stdout=False,
    )
    return child, lines


async def test_the_agent_runs_below_its_supervisor_with_its_own_pid() -> None:
    child, _ = await start("wait")
    try:
        assert child.pid != child.supervisor_pid
        assert psutil.Process(child.pid).ppid() == child.supervisor_pid
        assert os.getpgid(child.pid) == child.supervisor_pid  # one group, the supervisor's
    finally:
        await child.stop()
    await wait_gone(child.pid, child.supervisor_pid)


async def test_an_agent_that_exits_leaves_no_tool_and_its_status_is_kept() -> None:
    child, lines = await start("exit")
    assert await child.wait() == 3
    await child.drained()
    [tool] = [int(line) for line in lines]
    # The tool ran in a session of its own: its supervisor, not a process group, ended it.
    await wait_gone(tool)
    await child.stop()


async def test_an_agent_killed_by_a_signal_is_reported_so() -> None:
    child, _ = await start("wait")
    os.kill(child.pid, signal.SIGKILL)
    assert await child.wait() == -signal.SIGKILL
    await child.stop()


async def test_the_lifeline_closing_ends_the_whole_tree() -> None:
    """What the hub's death does (the kernel closes its end): nothing of the agent remains."""
    child, lines = await start("wait")
    try:
        deadline = time.monotonic() + 10
        while not lines:
            assert time.monotonic() < deadline, "the agent did not start its tool"
            await asyncio.sleep(0.02)
        [tool] = [int(line) for line in lines]
        assert not is_gone(tool)
        assert child.lifeline is not None
        child.lifeline.close()
        await wait_gone(tool, child.pid, child.supervisor_pid)
    finally:
        await child.stop()


async def test_a_start_cancelled_after_the_agent_started_leaves_no_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A turn cancelled (a takeover, a cancel) while its CLI is being started: by the time the
    # cancel goes on, the supervisor, the agent and its tool are gone.
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    real_first_line = child_module._first_line

    async def first_line_then_hold(lifeline: socket.socket) -> str:
        said = await real_first_line(lifeline)
        started.set_result(int(said.split()[1]))  # "started <agent pid>"
        await asyncio.get_running_loop().create_future()  # cancelled here
        return said

    monkeypatch.setattr(child_module, "_first_line", first_line_then_hold)
    start_task = asyncio.ensure_future(start("wait"))
    agent = await asyncio.wait_for(started, 10)
    supervisor = psutil.Process(agent).ppid()
    # The agent starts its tool in a session of its own: wait (bounded) until it has.
    deadline = time.monotonic() + 10
    while not [p for p in psutil.Process(agent).children() if p.name() == "sleep"]:
        assert time.monotonic() < deadline, "the agent started no tool"
        await asyncio.sleep(0.02)
    [tool] = [p.pid for p in psutil.Process(agent).children() if p.name() == "sleep"]
    start_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start_task
    assert [pid for pid in (supervisor, agent, tool) if not is_gone(pid)] == []
