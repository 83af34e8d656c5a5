"""A command-line worker calls the hub over MCP from inside its turn (W3, W9): the preset wires
its CLI to this hub with credentials of the turn, so ``spawn_child`` without a parent spawns
below the worker of that turn, as it does through function calling.

The fakes read what the presets hand the real CLIs: Claude Code's ``--mcp-config`` file (an HTTP
server with an ``Authorization`` header) and Codex's ``-c mcp_servers.parley.*`` overrides (its
``url``, ``bearer_token_env_var`` and ``default_tools_approval_mode``, without which the fake
refuses the call as ``codex exec`` does), and call the hub's real MCP endpoint over HTTP.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from parley.core.errors import Unauthenticated
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.turn_access import TurnBinding
from parley.service.workers.records import StartSpec
from parley.surfaces.rest.app import create_app
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.ready import ReadyListener
from tests.integration.mcp_support import (
    INITIALIZE,
    MCP_HEADERS,
    data,
    http_client,
    refusal,
    serving,
)
from tests.integration.test_workers import scripted

FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


@pytest.fixture
async def listening(hub: Hub) -> AsyncIterator[str]:
    """The hub's app served on loopback, its MCP endpoint known to the hub as a served hub's
    is (``parley serve`` sets it once it listens)."""
    async with serving(create_app(hub=hub)) as url:
        hub.identity.turn_access.mcp_url = f"{url}/mcp"
        yield url


def wrapper(tmp_path: Path, fake: str) -> str:
    """An executable that runs a fake CLI, as a preset's ``executable``."""
    path = tmp_path / f"{fake}-bin"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / fake}.py" "$@"\n')
    path.chmod(0o755)
    return str(path)


def claude_runtime(tmp_path: Path, ready: ReadyListener, mode: str) -> dict[str, Any]:
    env = {"FAKE_READY_PORT": str(ready.port), "FAKE_CLAUDE_MODE": mode}
    return {
        "kind": "command",
        "preset": "claude-code",
        "executable": wrapper(tmp_path, "fake_claude"),
        "env": env,
    }


def codex_runtime(tmp_path: Path, ready: ReadyListener) -> dict[str, Any]:
    env = {"FAKE_READY_PORT": str(ready.port), "FAKE_CODEX_LOGGED_IN": "1"}
    return {
        "kind": "command",
        "preset": "codex",
        "executable": wrapper(tmp_path, "fake_codex"),
        "env": env,
    }


async def reported(ready: ReadyListener, *kinds: str) -> list[str]:
    """The next line the fake reports whose first word is one of ``kinds``."""
    while (line := (await ready.next_line()).split())[0] not in kinds:
        continue
    return line


async def test_spawn_child_over_mcp_from_a_claude_code_turn_spawns_below_that_turns_worker(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    ready: ReadyListener,
    listening: str,
    tmp_path: Path,
) -> None:
    coder = await make_agent("coder", runtime=claude_runtime(tmp_path, ready, "spawn"))
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Audit it"))
    line = await reported(ready, "spawned", "spawn-failed")
    assert line[0] == "spawned", " ".join(line)
    child_id, parent_id, config, mode = line[1:]
    # The child hangs below the worker whose turn made the call, not a new main worker.
    assert parent_id == worker.id
    assert mode == "600"
    await hub.tasks.wait_idle()
    parent = await hub.workers.get(operator, worker.id)
    assert child_id in parent.children_worker_ids
    async with hub.store.read() as tx:
        assert await hub.workers.of_channel(tx, coder.principal.work_channel_id or "") is None
    # The turn's credentials ended with it: the config file is gone, the token is refused.
    assert not os.path.exists(config)
    token = hub.identity.turn_access.token_for(
        TurnBinding("coder", worker.channel_id, worker.session_id)
    )
    with pytest.raises(Unauthenticated):
        await hub.identity.authenticate(token)
    assert hub.identity.turn_access.live_count() == 0
    await hub.runtimes.aclose()


async def test_spawn_child_over_mcp_from_a_codex_turn_spawns_below_that_turns_worker(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    ready: ReadyListener,
    listening: str,
    tmp_path: Path,
) -> None:
    await make_agent("coder", runtime=codex_runtime(tmp_path, ready))
    worker = await hub.workers.start(
        operator, StartSpec(agent_id="coder", prompt="Audit it fake-mode=spawn")
    )
    line = await reported(ready, "spawned", "spawn-failed")
    assert line[0] == "spawned", " ".join(line)
    assert line[2] == worker.id
    await hub.tasks.wait_idle()
    assert line[1] in (await hub.workers.get(operator, worker.id)).children_worker_ids


async def test_a_turn_token_acts_from_its_turn_and_ends_with_it(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    listening: str,
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    working = lead.gate("Audit it")
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit it"))
    await lead.started["Audit it"].wait()
    binding = TurnBinding("lead", root.channel_id, root.session_id)
    with hub.identity.turn_access.open(binding) as token:
        async with http_client(f"{listening}/mcp?profile=workers", token) as client:
            child = data(await client.call_tool("spawn_child", {"prompt": "Check the lexer"}))
            assert child["parent_worker_id"] == root.id
            # A tool that would wait for another turn is refused from inside one.
            refused = refusal(await client.call_tool("wait_for_turn", {"timeout_s": 0}))
            assert refused["code"] == "not_in_a_turn"
            who = data(await client.call_tool("whoami", {}))
            assert who["id"] == "lead"
    # Ended with the turn: the same token no longer opens anything.
    async with httpx2.AsyncClient() as http:
        answer = await http.post(
            f"{listening}/mcp?profile=workers",
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"},
        )
    assert answer.status_code == 401
    working.set()
    await hub.tasks.wait_idle()


async def test_rotating_an_agents_tokens_ends_its_turn_tokens(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    await make_agent("lead")
    binding = TurnBinding("lead", "ch-1", "vs-1")
    with hub.identity.turn_access.open(binding) as token:
        assert (await hub.identity.authenticate(token)).id == "lead"
        await hub.identity.issue_token(operator, "lead", rotate=True)
        with pytest.raises(Unauthenticated):
            await hub.identity.authenticate(token)
