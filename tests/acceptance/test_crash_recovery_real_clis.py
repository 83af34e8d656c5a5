"""Kill -9 of ``parley serve`` while the real Claude Code and Codex run as its workers, each in
the middle of a turn (their model calls to the local fake model servers hang): no process of
those workers remains, checked by pid, with no restart needed (every supervisor sees its
lifeline close and ends its tree); the restarted hub only clears the dead hub's records.

Opt-in, deselected otherwise: set ``PARLEY_REAL_CLIS=1`` and have ``claude`` / ``codex`` on
``PATH`` (or ``PARLEY_CLAUDE_BIN`` / ``PARLEY_CODEX_BIN``); a binary that is not found skips its
test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest

from parley.adapters.runtimes import supervise
from tests.acceptance.test_crash_recovery import client
from tests.acceptance.test_crash_recovery_processes import (
    kill_9,
    ok,
    serve,
    until_orphan_event,
)
from tests.fakes.cli_model_servers import FakeAnthropicStreamServer, FakeResponsesServer
from tests.fakes.model_server import FakeReply
from tests.fakes.processes import wait_gone
from tests.unit.test_runtime_real_clis import binary, private_home

pytestmark = pytest.mark.real_clis


@pytest.fixture(autouse=True)
def allow_the_real_clis(monkeypatch: pytest.MonkeyPatch) -> None:
    # The served hub reads the switch from its environment; the binaries only ever talk to the
    # fake model servers and the hub on 127.0.0.1.
    monkeypatch.setenv("PARLEY_ALLOW_MODEL_REQUESTS", "1")


def runtimes(
    tmp_path: Path, anthropic: FakeAnthropicStreamServer, responses: FakeResponsesServer
) -> dict[str, dict[str, Any]]:
    claude_env = {
        **private_home(tmp_path / "claude"),
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    provider = [
        "-c",
        "model_provider=fake",
        "-c",
        "model_providers.fake.name=fake",
        "-c",
        f"model_providers.fake.base_url={responses.base_url}",
        "-c",
        "model_providers.fake.wire_api=responses",
        "-c",
        "model_providers.fake.stream_max_retries=0",
    ]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return {
        "claude-agent": {
            "kind": "command",
            "preset": "claude-code",
            "executable": binary("claude", "PARLEY_CLAUDE_BIN"),
            "env": claude_env,
            "cwd": str(workspace),
        },
        "codex-agent": {
            "kind": "command",
            "preset": "codex",
            "executable": binary("codex", "PARLEY_CODEX_BIN"),
            "env": private_home(tmp_path / "codex"),
            "cwd": str(workspace),
            "extra_args": provider,
        },
    }


def is_supervisor(process: psutil.Process) -> bool:
    return any(arg.endswith(Path(supervise.__file__).name) for arg in process.cmdline())


async def test_kill_9_of_the_hub_ends_every_process_of_its_real_cli_workers(
    tmp_path: Path, backend: str, database_url: str
) -> None:
    home = tmp_path / "home"
    async with FakeAnthropicStreamServer() as anthropic, FakeResponsesServer() as responses:
        # Every model call hangs: each CLI stays in the middle of its first turn.
        anthropic.default = FakeReply(hang=True)
        responses.default = FakeReply(hang=True)
        first = serve(home, backend, database_url)
        try:
            async with client(first.url, first.token) as op:
                for agent, runtime in runtimes(tmp_path, anthropic, responses).items():
                    body = {"id": agent, "runtime": runtime}
                    await ok(await op.post("/v1/agents", json=body), 201)
                    start = {"agent_id": agent, "prompt": "Port the parser"}
                    await ok(await op.post("/v1/workers", json=start), 201)
            await asyncio.wait_for(anthropic.received.wait(), 120)
            await asyncio.wait_for(responses.received.wait(), 120)

            # Every process below the hub: the two supervisors and, below them, the CLIs
            # (Codex's launcher and its native binary) and whatever they started.
            below = psutil.Process(first.proc.pid).children(recursive=True)
            supervisors = [p for p in below if is_supervisor(p)]
            assert len(supervisors) == 2, [p.cmdline() for p in below]
            assert all(p.children() for p in supervisors)
            names = " ".join(" ".join(p.cmdline()) for p in below)
            assert "claude" in names and "codex" in names, names
            pids = [p.pid for p in below]
            kill_9(first)
            # No restart: the supervisors saw their lifeline close and ended their trees.
            await wait_gone(*pids)
        finally:
            first.stop()

    second = serve(home, backend, database_url)
    try:
        event = await until_orphan_event(second)
        assert event["payload"]["records"] == 2
        assert event["payload"]["ended_pids"] == []
    finally:
        second.stop()
