"""The command runtime against fake executables: text protocol, Claude Code stream-json one
process per turn (``keep_alive: false``), config rules, and the process-group cleanup on timeout
and cancel. The kept-alive Claude Code process and Codex have their own test modules."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes.claude_code import CLAUDE_SESSION_KEY
from parley.adapters.runtimes.command import CommandRuntime
from parley.adapters.runtimes.factory import build_runtime
from parley.core.errors import ConfigError, InvalidRequest, RuntimeFailure
from parley.core.runtime import Usage
from tests.fakes.processes import wait_gone
from tests.fakes.ready import ReadyListener
from tests.fakes.turns import PROMPT, Reports, make_turn

FAKES = Path(__file__).resolve().parent.parent / "fakes"
AGENT = [sys.executable, str(FAKES / "agent_command.py")]
CLAUDE = [sys.executable, str(FAKES / "fake_claude.py")]


def command(argv: list[str], **options: Any) -> CommandRuntime:
    runtime = build_runtime({"kind": "command", "argv": argv, **options})
    assert isinstance(runtime, CommandRuntime)
    return runtime


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


async def test_text_protocol_sends_the_rendered_prompt_and_reads_stdout() -> None:
    result = await command([*AGENT, "echo"]).respond(make_turn())
    assert result.text == PROMPT.render().strip()
    assert result.model_route.startswith("command:python")
    assert "provider_wait_ms" in result.timings


async def test_cwd_and_env_reach_the_child(tmp_path: Path) -> None:
    script = "import os; print(os.getcwd(), os.environ['PARLEY_TEST_GREETING'])"
    runtime = command([sys.executable, "-c", script], env={"PARLEY_TEST_GREETING": "hello"})
    result = await runtime.respond(make_turn(workspace=str(tmp_path)))
    assert result.text == f"{tmp_path} hello"


async def test_a_nonzero_exit_is_a_failure_with_the_stderr_tail() -> None:
    with pytest.raises(RuntimeFailure) as caught:
        await command([*AGENT, "fail"]).respond(make_turn())
    failure = caught.value
    assert failure.reason == "error"
    assert failure.details["exit_code"] == 3
    assert "the model is on fire" in failure.details["stderr_tail"]
    assert "exit status 3" in failure.message
    assert "the model is on fire" in failure.message


async def test_no_output_is_an_empty_failure() -> None:
    with pytest.raises(RuntimeFailure) as caught:
        await command([*AGENT, "silent"]).respond(make_turn())
    assert caught.value.reason == "empty"


async def test_a_missing_program_is_a_failure() -> None:
    with pytest.raises(RuntimeFailure) as caught:
        await command(["/nonexistent/agent-binary"]).respond(make_turn())
    assert caught.value.reason == "error"
    assert "cannot start command" in caught.value.message


async def test_timeout_kills_the_whole_process_group(ready: ReadyListener) -> None:
    runtime = command([*AGENT, "hang"], env={"FAKE_READY_PORT": str(ready.port)})
    call = asyncio.create_task(runtime.respond(make_turn(timeout_s=3)))
    child, grandchild = map(int, (await ready.next_line(unless=call)).split())
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "timeout"
    await wait_gone(child, grandchild)


async def test_cancel_kills_a_group_that_ignores_sigterm(ready: ReadyListener) -> None:
    runtime = command(
        [*AGENT, "hang", "--ignore-term"],
        env={"FAKE_READY_PORT": str(ready.port)},
        kill_grace_s=0.2,
    )
    cancel = asyncio.Event()
    call = asyncio.create_task(runtime.respond(make_turn(cancel=cancel)))
    child, grandchild = map(int, (await ready.next_line(unless=call)).split())
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"
    await wait_gone(child, grandchild)


def one_shot_claude(mode: str, **options: Any) -> CommandRuntime:
    """Claude Code with a process per turn (``keep_alive: false``)."""
    return command([*CLAUDE, mode], protocol="claude-stream-json", keep_alive=False, **options)


async def test_claude_stream_json_reply_session_and_resume() -> None:
    runtime = one_shot_claude("reply")
    assert runtime.sessions is None
    first = await runtime.respond(make_turn())
    assert first.text == f"heard: {PROMPT.render().strip().splitlines()[-1]}"
    assert first.usage == Usage(
        input_tokens=11, output_tokens=5, model="claude-sonnet-4-5", cost_usd=0.000125
    )
    assert first.runtime_state is not None
    session = first.runtime_state[CLAUDE_SESSION_KEY]
    # The next turn passes the session back; the fake only keeps it if --resume=<id> was given.
    second = await runtime.respond(make_turn(runtime_state=first.runtime_state))
    assert second.runtime_state == {CLAUDE_SESSION_KEY: session}
    assert "resumed_fresh" not in second.timings
    fresh = await runtime.respond(make_turn())
    assert fresh.runtime_state != {CLAUDE_SESSION_KEY: session}


async def test_claude_one_shot_drops_a_stale_session_and_says_so(tmp_path: Path) -> None:
    runtime = one_shot_claude("reply", env={"FAKE_CLAUDE_HOME": str(tmp_path)})
    stale = {CLAUDE_SESSION_KEY: "6f0c3b7e-0000-4000-8000-000000000000"}
    result = await runtime.respond(make_turn(runtime_state=stale))
    assert result.text.startswith("heard:")
    assert result.timings["resumed_fresh"] == 1.0
    assert result.runtime_state is not None
    fresh = result.runtime_state[CLAUDE_SESSION_KEY]
    assert fresh != stale[CLAUDE_SESSION_KEY]
    # The fresh session is a real one: the next turn resumes it without starting over.
    again = await runtime.respond(make_turn(runtime_state=result.runtime_state))
    assert again.runtime_state == {CLAUDE_SESSION_KEY: fresh}
    assert "resumed_fresh" not in again.timings


@pytest.mark.parametrize(
    ("mode", "reason", "stop_reason", "said"),
    [
        ("error", "error", "success", "Claude Code reported an error: API Error: 529 overloaded"),
        ("max-turns", "stop_reason", "error_max_turns", "stopped before finishing the turn"),
        ("no-result", "error", None, "without a result event"),
    ],
)
async def test_claude_errors_are_failures(
    mode: str, reason: str, stop_reason: str | None, said: str
) -> None:
    with pytest.raises(RuntimeFailure) as caught:
        await one_shot_claude(mode).respond(make_turn())
    assert caught.value.reason == reason
    assert caught.value.stop_reason == stop_reason
    assert said in caught.value.message
    assert "'success'" not in caught.value.message


async def test_claude_one_shot_failure_keeps_the_exit_code_and_stderr() -> None:
    with pytest.raises(RuntimeFailure) as caught:
        await one_shot_claude("crash").respond(make_turn())
    failure = caught.value
    assert failure.details["exit_code"] == 2
    assert "the session store is corrupt" in failure.details["stderr_tail"]
    assert "exit status 2" in failure.message
    assert "the session store is corrupt" in failure.message


async def test_a_json_stream_whose_last_line_has_no_line_break_is_read_whole() -> None:
    # Each stdout line is read once, as it arrives: the last one counts even without its "\n".
    result = {"type": "result", "subtype": "success", "result": "done", "session_id": "s-1"}
    script = f"import sys; sys.stdin.readline(); sys.stdout.write({json.dumps(result)!r})"
    runtime = command(
        [sys.executable, "-c", script], protocol="claude-stream-json", keep_alive=False
    )
    reply = await runtime.respond(make_turn())
    assert reply.text == "done"
    assert reply.runtime_state == {CLAUDE_SESSION_KEY: "s-1"}


async def test_claude_cancel_sends_an_interrupt_first(ready: ReadyListener) -> None:
    runtime = one_shot_claude("slow", env={"FAKE_READY_PORT": str(ready.port)})
    cancel = asyncio.Event()
    turn = make_turn(cancel=cancel)
    call = asyncio.create_task(runtime.respond(turn))
    pid = int((await ready.next_line(unless=call)).split()[1])
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"
    assert await ready.next_line() == f"interrupted parley-{turn.invocation_id}"
    # One process per turn: it is gone with its turn.
    await wait_gone(pid)


async def test_claude_one_shot_reports_its_session_at_init_before_the_result(
    ready: ReadyListener,
) -> None:
    runtime = one_shot_claude("slow", env={"FAKE_READY_PORT": str(ready.port)})
    cancel = asyncio.Event()
    reports = Reports()
    call = asyncio.create_task(runtime.respond(make_turn(cancel=cancel, state_sink=reports.sink)))
    session = (await ready.next_line(unless=call)).split()[3]
    # Mid-turn, no result yet: the init event's session id is already with the caller.
    assert await reports.next(call) == {CLAUDE_SESSION_KEY: session}
    assert not call.done()
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"
    assert reports.rest() == []  # once, though every event names the session


def test_real_claude_and_codex_are_blocked_in_tests() -> None:
    for config in (
        {"kind": "command", "preset": "claude-code"},
        {"kind": "command", "preset": "codex"},
        {"kind": "command", "preset": "claude-code", "executable": "/opt/tools/claude"},
        {"kind": "command", "argv": ["/usr/local/bin/claude", "-p"]},
        # What the npm packages install behind their links.
        {"kind": "command", "argv": ["/x/node_modules/@anthropic-ai/claude-code/bin/claude.exe"]},
        {"kind": "command", "preset": "codex", "executable": "/x/@openai/codex/bin/codex.js"},
    ):
        with pytest.raises(ConfigError) as caught:
            build_runtime(config)
        assert caught.value.code == "model_requests_blocked"


@pytest.mark.parametrize(
    ("config", "complaint"),
    [
        ({"kind": "command"}, "either 'argv'"),
        ({"kind": "command", "argv": []}, "must name the program"),
        ({"kind": "command", "argv": ["x"], "protocol": "smoke-signals"}, "protocol"),
        ({"kind": "command", "argv": ["x"], "timeout_s": -1}, "timeout_s"),
        ({"kind": "command", "argv": ["x"], "executable": "y"}, "argv[0]"),
        ({"kind": "command", "preset": "codex", "executable": ""}, "'executable'"),
        ({"kind": "command", "argv": ["x"], "keep_alive": True}, "claude-stream-json"),
        ({"kind": "command", "preset": "codex", "keep_alive": True}, "claude-stream-json"),
        ({"kind": "command", "preset": "claude-code", "idle_s": 0}, "idle_s"),
    ],
)
def test_bad_command_configs_are_refused_clearly(config: dict[str, Any], complaint: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        build_runtime(config)
    assert caught.value.code == "invalid_runtime_config"
    assert complaint in caught.value.message
