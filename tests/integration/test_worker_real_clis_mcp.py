"""The real Claude Code and Codex, as workers of a served hub, call ``spawn_child`` over the
hub's MCP endpoint from inside their turn, wired by the presets alone (no token in the runtime
config), and the child hangs below the worker of that turn. A local fake model server plays the
model: it calls the ``spawn_child`` tool the CLI offers it, then answers.

Opt-in, deselected otherwise: set ``PARLEY_REAL_CLIS=1`` and have ``claude`` / ``codex`` on
``PATH`` (or ``PARLEY_CLAUDE_BIN`` / ``PARLEY_CODEX_BIN``); a binary that is not found skips its
test.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes import guard
from parley.adapters.runtimes.command import CommandRuntime
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.workers.records import StartSpec
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent
from tests.fakes.cli_model_servers import FakeAnthropicStreamServer, FakeResponsesServer
from tests.fakes.model_server import FakeCall, FakeReply
from tests.integration.mcp_support import serving
from tests.unit.test_runtime_real_clis import binary, private_home

pytestmark = pytest.mark.real_clis

SUB_TASK = "Check the lexer for unbalanced quotes"


@pytest.fixture(autouse=True)
def allow_the_real_clis(monkeypatch: pytest.MonkeyPatch) -> None:
    # The binaries only ever talk to the fake model servers and the hub on 127.0.0.1.
    monkeypatch.setattr(guard, "ALLOW_MODEL_REQUESTS", True)


@pytest.fixture
async def listening(hub: Hub) -> AsyncIterator[str]:
    async with serving(create_app(hub=hub)) as url:
        hub.identity.turn_access.mcp_url = f"{url}/mcp"
        yield url


def spawning_model(tool_names: Any, answered: Any) -> Any:
    """A responder: the parent's first request calls the offered ``spawn_child`` tool; a
    request carrying the tool's result, or the child's own turn, gets a plain answer."""

    def respond(body: dict[str, Any]) -> FakeReply:
        text = json.dumps(body)
        if SUB_TASK in text and "Task from" in text and not answered(body):
            return FakeReply(text="The lexer is fine.")
        if answered(body):
            return FakeReply(text="Spawned the sub-task.")
        names = [n for n in tool_names(body) if n[1].endswith("spawn_child")]
        if not names:
            return FakeReply(text="No spawn_child tool was offered.")
        namespace, name = names[0]
        arguments = {"prompt": SUB_TASK, "inherit_context": False}
        return FakeReply(text="", calls=[FakeCall(name, arguments, namespace)])

    return respond


def anthropic_tools(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Claude Code names an MCP tool ``mcp__<server>__<tool>``."""
    return [(None, str(t.get("name"))) for t in body.get("tools") or ()]


def anthropic_answered(body: dict[str, Any]) -> bool:
    """Whether the request carries the tool's result: its last message does."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    blocks = content if isinstance(content, list) else []
    return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)


def responses_tools(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Codex offers an MCP server's tools inside a namespace ``mcp__<server>``."""
    names: list[tuple[str | None, str]] = []
    for tool in body.get("tools") or ():
        if tool.get("type") == "namespace":
            names += [(str(tool.get("name")), str(t.get("name"))) for t in tool.get("tools") or ()]
        else:
            names.append((None, str(tool.get("name"))))
    return names


def responses_answered(body: dict[str, Any]) -> bool:
    """Whether the request carries the tool's result: its last input item is it."""
    items = body.get("input") if isinstance(body.get("input"), list) else [{}]
    return isinstance(items[-1], dict) and items[-1].get("type") == "function_call_output"


async def check_spawned_below(
    hub: Hub, operator: Principal, worker_id: str, children: int = 1
) -> None:
    await hub.tasks.wait_idle()
    parent = await hub.workers.get(operator, worker_id)
    assert len(parent.children_worker_ids) == children, parent
    for child_id in parent.children_worker_ids:
        child = await hub.workers.get(operator, child_id)
        assert child.parent_worker_id == worker_id
        async with hub.store.read() as tx:
            dispatch = await tx.get("messages", child.dispatch_message_id)
        assert dispatch is not None and SUB_TASK in dispatch.body


async def test_real_claude_code_spawns_over_mcp_below_its_turns_worker(
    hub: Hub, operator: Principal, make_agent: MakeAgent, listening: str, tmp_path: Path
) -> None:
    async with FakeAnthropicStreamServer() as model:
        model.responder = spawning_model(anthropic_tools, anthropic_answered)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        env = {
            **private_home(tmp_path),
            "ANTHROPIC_BASE_URL": model.base_url,
            "ANTHROPIC_API_KEY": "dummy",
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        runtime = {
            "kind": "command",
            "preset": "claude-code",
            "executable": binary("claude", "PARLEY_CLAUDE_BIN"),
            "env": env,
            "cwd": str(workspace),
        }
        await make_agent("coder", runtime=runtime)
        worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Audit"))
        try:
            await check_spawned_below(hub, operator, worker.id)
            cli = hub.runtimes.get("coder", {**runtime, "kind": "command"})
            assert isinstance(cli, CommandRuntime)
            pid = cli.live_pid(worker.session_id)
            assert pid is not None
            # The next turn goes to the same kept-alive process, whose MCP server was given
            # with the first turn: the session's turn token holds again for this turn.
            await hub.channels.post(operator, worker.channel_id, "Audit once more")
            await check_spawned_below(hub, operator, worker.id, children=2)
            assert cli.live_pid(worker.session_id) == pid
        finally:
            await hub.runtimes.aclose()


async def test_real_codex_spawns_over_mcp_below_its_turns_worker(
    hub: Hub, operator: Principal, make_agent: MakeAgent, listening: str, tmp_path: Path
) -> None:
    async with FakeResponsesServer() as model:
        model.responder = spawning_model(responses_tools, responses_answered)
        provider = [
            "-c",
            "model_provider=fake",
            "-c",
            "model_providers.fake.name=fake",
            "-c",
            f"model_providers.fake.base_url={model.base_url}",
            "-c",
            "model_providers.fake.wire_api=responses",
            "-c",
            "model_providers.fake.stream_max_retries=0",
        ]
        runtime = {
            "kind": "command",
            "preset": "codex",
            "executable": binary("codex", "PARLEY_CODEX_BIN"),
            "env": private_home(tmp_path),
            "cwd": str(tmp_path),
            "extra_args": provider,
            # A model Codex knows the family of: for an unknown one it offers no tools at all.
            "model": "gpt-5.1-codex",
        }
        await make_agent("coder", runtime=runtime)
        worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Audit"))
        await check_spawned_below(hub, operator, worker.id)
