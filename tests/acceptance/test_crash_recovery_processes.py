"""Kill -9 (and SIGTERM) of ``parley serve`` while command-line workers run: none of their
processes remains.

A real ``parley serve`` on the backend under test runs a Claude Code worker and a Codex worker
(the fakes, each starting a tool in a session of its own at the start of its turn, as Claude
Code runs Bash). The hub is killed with SIGKILL mid-turn:

- the supervisors see their lifeline close and end every process below them (no restart
  needed), and the restarted hub clears the dead hub's records and says so;
- when the supervisors themselves are killed too (stopped first, so they cannot act), the
  CLIs and tools are left to init; the restarted hub finds them by its records and by the
  owner in their environment, ends them, and names them in ``runtime.orphans_ended``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.acceptance.cli_support import ServedHub, spawn_hub, wait_ready
from tests.acceptance.test_crash_recovery import client
from tests.fakes.processes import is_gone, wait_gone
from tests.fakes.ready import ReadyListener
from tests.integration.discussion_support import eventually

FAKES = Path(__file__).resolve().parents[1] / "fakes"
ORPHANS_ENDED = "runtime.orphans_ended"


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


def serve(home: Path, backend: str, database_url: str) -> ServedHub:
    return wait_ready(spawn_hub(home, database_url=database_url if backend == "postgres" else None))


def runtimes(tmp_path: Path, ready: ReadyListener, tool_pids: Path) -> dict[str, dict[str, Any]]:
    common = {"FAKE_READY_PORT": str(ready.port), "FAKE_TOOL_PIDS": str(tool_pids)}
    codex = tmp_path / "codex-fake"
    codex.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_codex.py"}" "$@"\n')
    codex.chmod(0o755)
    return {
        "claude-agent": {
            "kind": "command",
            "protocol": "claude-stream-json",
            "argv": [sys.executable, str(FAKES / "fake_claude.py"), "slow"],
            "env": common,
        },
        "codex-agent": {
            "kind": "command",
            "preset": "codex",
            "executable": str(codex),
            "env": {**common, "FAKE_CODEX_MODE": "hang", "FAKE_CODEX_LOGGED_IN": "1"},
        },
    }


async def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


async def start_workers(
    hub: ServedHub, tmp_path: Path, ready: ReadyListener, tool_pids: Path
) -> list[int]:
    """A Claude Code and a Codex worker, each mid-turn; the pids of their CLIs."""
    async with client(hub.url, hub.token) as op:
        for agent, runtime in runtimes(tmp_path, ready, tool_pids).items():
            await ok(await op.post("/v1/agents", json={"id": agent, "runtime": runtime}), 201)
            body = {"agent_id": agent, "prompt": "Port the parser"}
            await ok(await op.post("/v1/workers", json=body), 201)
    clis = []
    while len(clis) < 2:
        line = (await ready.next_line()).split()
        if line[0] == "turn":
            clis.append(int(line[1]))
    return clis


def tools_of(tool_pids: Path) -> list[int]:
    return [int(line.split()[1]) for line in tool_pids.read_text().splitlines()]


async def orphan_events(hub: ServedHub) -> list[dict[str, Any]]:
    async with client(hub.url, hub.token) as op:
        return list(await ok(await op.get("/v1/events", params={"type": ORPHANS_ENDED})))


async def until_orphan_event(hub: ServedHub) -> dict[str, Any]:
    """The restarted hub's ``runtime.orphans_ended`` (at start, or its first lease sweep)."""
    found: list[dict[str, Any]] = []

    async def recorded() -> bool:
        found[:] = await orphan_events(hub)
        return bool(found)

    # Its first lease sweep may come well after start on a loaded machine: a longer bound.
    await eventually(recorded, "the restarted hub's runtime.orphans_ended event", bound_s=30)
    [event] = found
    return event


def kill_9(hub: ServedHub) -> None:
    hub.proc.kill()
    hub.proc.wait()


async def test_kill_9_of_the_hub_ends_every_process_of_its_workers(
    tmp_path: Path, backend: str, database_url: str, ready: ReadyListener
) -> None:
    home = tmp_path / "home"
    tool_pids = tmp_path / "tool-pids"
    first = serve(home, backend, database_url)
    try:
        clis = await start_workers(first, tmp_path, ready, tool_pids)
        tools = tools_of(tool_pids)
        supervisors = [psutil.Process(pid).ppid() for pid in clis]
        assert len(tools) == 2 and first.proc.pid not in supervisors
        kill_9(first)
        # No restart: the supervisors saw their lifeline close and ended their trees.
        await wait_gone(*clis, *tools, *supervisors)
    finally:
        first.stop()

    second = serve(home, backend, database_url)
    try:
        event = await until_orphan_event(second)
        assert event["payload"]["records"] == 2
        assert event["payload"]["ended_pids"] == []
    finally:
        second.stop()


async def test_a_restarted_hub_ends_what_a_dead_hub_and_its_supervisors_left(
    tmp_path: Path, backend: str, database_url: str, ready: ReadyListener
) -> None:
    home = tmp_path / "home"
    tool_pids = tmp_path / "tool-pids"
    first = serve(home, backend, database_url)
    try:
        clis = await start_workers(first, tmp_path, ready, tool_pids)
        tools = tools_of(tool_pids)
        supervisors = [psutil.Process(pid).ppid() for pid in clis]
        for pid in supervisors:
            os.kill(pid, signal.SIGSTOP)
        kill_9(first)
        for pid in supervisors:
            os.kill(pid, signal.SIGKILL)
        await wait_gone(*supervisors)
        # Left to init: the tools (and the Codex CLI, which waits on no pipe) still run.
        assert not any(is_gone(pid) for pid in tools)
    finally:
        first.stop()

    second = serve(home, backend, database_url)
    try:
        await wait_gone(*clis, *tools)
        event = await until_orphan_event(second)
        assert event["payload"]["records"] == 2
        assert set(tools) <= set(event["payload"]["ended_pids"])
    finally:
        second.stop()


async def test_sigterm_of_the_hub_ends_every_process_of_its_workers(
    tmp_path: Path, backend: str, database_url: str, ready: ReadyListener
) -> None:
    home = tmp_path / "home"
    tool_pids = tmp_path / "tool-pids"
    hub = serve(home, backend, database_url)
    try:
        clis = await start_workers(hub, tmp_path, ready, tool_pids)
        tools = tools_of(tool_pids)
        supervisors = [psutil.Process(pid).ppid() for pid in clis]
    finally:
        assert hub.stop() == 0  # SIGTERM: a clean stop
    await wait_gone(*clis, *tools, *supervisors)
