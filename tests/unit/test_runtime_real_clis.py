"""The real Claude Code and Codex binaries driven by the ``command`` runtime against local fake
model servers (no network). Opt-in, deselected otherwise: set ``PARLEY_REAL_CLIS=1`` and have
``claude`` / ``codex`` on ``PATH`` (or name them with ``PARLEY_CLAUDE_BIN`` /
``PARLEY_CODEX_BIN``); each binary's tests are skipped when it is not found. Checked with
Claude Code 2.1.197 and codex-cli 0.171.0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes import guard
from parley.adapters.runtimes.claude_code import CLAUDE_SESSION_KEY
from parley.adapters.runtimes.codex import CODEX_THREAD_KEY
from parley.adapters.runtimes.command import CommandRuntime
from parley.adapters.runtimes.factory import build_runtime
from parley.core.errors import RuntimeFailure
from parley.core.runtime import TurnInput
from tests.fakes.cli_model_servers import FakeAnthropicStreamServer, FakeResponsesServer
from tests.fakes.model_server import FakeReply
from tests.fakes.processes import is_gone
from tests.fakes.turns import PROMPT, make_turn

# Deselected at collection unless PARLEY_REAL_CLIS=1 (tests/conftest.py).
pytestmark = pytest.mark.real_clis


def binary(name: str, variable: str) -> str:
    found = os.environ.get(variable) or shutil.which(name)
    if not found:
        pytest.skip(f"{name!r} not found on PATH and {variable} not set")
    return found


@pytest.fixture(autouse=True)
def allow_the_real_clis(monkeypatch: pytest.MonkeyPatch) -> None:
    # The binaries only ever talk to the fake servers on 127.0.0.1 below.
    monkeypatch.setattr(guard, "ALLOW_MODEL_REQUESTS", True)


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropicStreamServer]:
    server = FakeAnthropicStreamServer()
    async with server:
        yield server


@pytest.fixture
async def responses() -> AsyncIterator[FakeResponsesServer]:
    server = FakeResponsesServer()
    async with server:
        yield server


def private_home(tmp_path: Path) -> dict[str, str]:
    """A home of the test's own, so the CLIs neither read nor write the user's settings."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    return {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}


async def test_real_claude_code_keeps_one_process_interrupts_and_resumes(
    tmp_path: Path, anthropic: FakeAnthropicStreamServer
) -> None:
    env = {
        **private_home(tmp_path),
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runtime = build_runtime(
        {
            "kind": "command",
            "preset": "claude-code",
            "executable": binary("claude", "PARLEY_CLAUDE_BIN"),
            "env": env,
            "cwd": str(workspace),
        }
    )
    assert isinstance(runtime, CommandRuntime)
    try:
        first = await runtime.respond(make_turn(round=1))
        assert first.text == "Looks good to me."
        assert first.runtime_state is not None
        session = first.runtime_state[CLAUDE_SESSION_KEY]
        pid = runtime.live_pid("s-alice")
        assert pid is not None

        # Interrupt a turn whose model call hangs: the process and the session survive.
        anthropic.script(FakeReply(hang=True))
        anthropic.received.clear()
        cancel = asyncio.Event()
        call = asyncio.ensure_future(
            runtime.respond(make_turn(round=2, cancel=cancel, runtime_state=first.runtime_state))
        )
        await anthropic.received.wait()
        cancel.set()
        with pytest.raises(RuntimeFailure) as caught:
            await call
        assert caught.value.reason == "cancelled"
        assert caught.value.details["interrupt_answered"] is True
        assert runtime.live_pid("s-alice") == pid and not is_gone(pid)

        third = await runtime.respond(make_turn(round=3, runtime_state=first.runtime_state))
        assert third.runtime_state == {CLAUDE_SESSION_KEY: session}
        assert runtime.live_pid("s-alice") == pid

        # After the process is gone, a stale id is dropped and a fresh session answers.
        stale = {CLAUDE_SESSION_KEY: str(uuid.uuid4())}
        fresh = await runtime.respond(make_turn("bob", runtime_state=stale))
        assert fresh.timings["resumed_fresh"] == 1.0
        assert fresh.runtime_state is not None
        assert fresh.runtime_state[CLAUDE_SESSION_KEY] != stale[CLAUDE_SESSION_KEY]
    finally:
        await runtime.aclose()


async def test_real_codex_replies_resumes_and_drops_a_stale_thread(
    tmp_path: Path, responses: FakeResponsesServer
) -> None:
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
    runtime = build_runtime(
        {
            "kind": "command",
            "preset": "codex",
            "executable": binary("codex", "PARLEY_CODEX_BIN"),
            "env": private_home(tmp_path),
            "cwd": str(tmp_path),
            "extra_args": provider,
        }
    )
    first = await runtime.respond(make_turn(round=1))
    assert first.text == "Looks good to me."
    assert first.runtime_state is not None
    thread = first.runtime_state[CODEX_THREAD_KEY]
    second = await runtime.respond(make_turn(round=2, runtime_state=first.runtime_state))
    assert second.runtime_state == {CODEX_THREAD_KEY: thread}
    assert len(responses.requests) == 2

    stale = {CODEX_THREAD_KEY: str(uuid.uuid4())}
    fresh = await runtime.respond(make_turn(round=3, runtime_state=stale))
    assert fresh.timings["resumed_fresh"] == 1.0
    assert fresh.runtime_state is not None
    assert fresh.runtime_state[CODEX_THREAD_KEY] not in (thread, stale[CODEX_THREAD_KEY])


async def test_real_claude_code_answers_mail_pushed_into_its_running_turn(
    tmp_path: Path, anthropic: FakeAnthropicStreamServer
) -> None:
    # Claude Code 2.1.197 queues a message that comes while the model call runs, echoes it
    # (with the uuid it was sent with) when it takes it, and answers it in a turn of its own:
    # the turn's answer is that last result, not the one before the echo.
    env = {
        **private_home(tmp_path),
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    runtime = build_runtime(
        {
            "kind": "command",
            "preset": "claude-code",
            "executable": binary("claude", "PARLEY_CLAUDE_BIN"),
            "env": env,
            "cwd": str(tmp_path),
        }
    )
    assert isinstance(runtime, CommandRuntime)
    anthropic.script(FakeReply(text="Working on the plan.", hang=True))
    anthropic.default = FakeReply(text="Noted: the API stays.")
    live = TurnInput()
    try:
        call = asyncio.ensure_future(runtime.respond(make_turn(live_input=live)))
        await anthropic.received.wait()
        assert await live.push("<pending_mail>\nKeep the public API.\n</pending_mail>")
        anthropic.release.set()
        result = await call
        assert result.text == "Noted: the API stays."
        assert any("Keep the public API." in json.dumps(r) for r in anthropic.requests)
    finally:
        await runtime.aclose()


async def test_real_claude_code_mail_queued_before_an_interrupt_never_answers_a_later_turn(
    tmp_path: Path, anthropic: FakeAnthropicStreamServer
) -> None:
    # Claude Code 2.1.197 keeps a message it queued when the turn is interrupted, and answers
    # it in a turn of its own right after: that answer is not the next turn's.
    env = {
        **private_home(tmp_path),
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    runtime = build_runtime(
        {
            "kind": "command",
            "preset": "claude-code",
            "executable": binary("claude", "PARLEY_CLAUDE_BIN"),
            "env": env,
            "cwd": str(tmp_path),
        }
    )
    assert isinstance(runtime, CommandRuntime)
    tasks = ("Second task", "Third task")

    def answer(body: dict[str, Any]) -> FakeReply:
        last = json.dumps(body["messages"][-1])
        return FakeReply(text=next((f"done: {t}" for t in tasks if t in last), "other"))

    anthropic.responder = answer
    anthropic.script(FakeReply(text="Working.", hang=True), FakeReply(text="Noted.", hang=True))
    live = TurnInput()
    cancel = asyncio.Event()
    try:
        call = asyncio.ensure_future(
            runtime.respond(make_turn(round=1, cancel=cancel, live_input=live))
        )
        await anthropic.received.wait()
        anthropic.received.clear()
        assert await live.push("<pending_mail>\nKeep the public API.\n</pending_mail>")
        cancel.set()
        with pytest.raises(RuntimeFailure) as caught:
            await call
        assert caught.value.reason == "cancelled"
        await anthropic.received.wait()  # the queued message's own turn calls the model
        for n, task in enumerate(tasks, start=2):
            prompt = dataclasses.replace(PROMPT, task=task)
            call = asyncio.ensure_future(runtime.respond(make_turn(round=n, prompt=prompt)))
            anthropic.release.set()
            assert (await call).text == f"done: {task}"
        assert any("Keep the public API." in json.dumps(r) for r in anthropic.requests)
    finally:
        await runtime.aclose()
