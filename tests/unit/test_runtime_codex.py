"""The ``codex`` preset against the fake Codex run as a real subprocess (through the preset's
``executable``): replies and resume, retries that are not failures, failures that keep their
cause, a stale thread id, the login check and the network bound that fail fast, and cancel."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes.codex import CODEX_THREAD_KEY
from parley.adapters.runtimes.command import CommandRuntime
from parley.adapters.runtimes.factory import build_runtime
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Turn
from tests.fakes.processes import wait_gone
from tests.fakes.ready import ReadyListener
from tests.fakes.turns import PROMPT, Reports, make_turn

FAKE_CODEX = Path(__file__).resolve().parent.parent / "fakes" / "fake_codex.py"
HEARD = f"heard: {PROMPT.render().strip().splitlines()[-1]}"

MakeRuntime = Callable[..., CommandRuntime]


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


@pytest.fixture
def codex(ready: ReadyListener, tmp_path: Path) -> MakeRuntime:
    """Build ``codex`` preset runtimes whose executable is the fake (a script named like a
    custom build, so the guard against real CLIs lets it run)."""
    executable = tmp_path / "codex-fake"
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CODEX}" "$@"\n')
    executable.chmod(0o755)
    threads = tmp_path / "threads"
    threads.mkdir()

    def make(*, env: dict[str, str] | None = None, **options: Any) -> CommandRuntime:
        base = {
            "FAKE_READY_PORT": str(ready.port),
            "FAKE_CODEX_HOME": str(threads),
            "FAKE_CODEX_LOGGED_IN": "1",
            # Whatever the machine exports, the login check is decided by the test.
            "CODEX_API_KEY": "",
            "OPENAI_API_KEY": "",
        }
        runtime = build_runtime(
            {
                "kind": "command",
                "preset": "codex",
                "executable": str(executable),
                "env": {**base, **(env or {})},
                **options,
            }
        )
        assert isinstance(runtime, CommandRuntime)
        return runtime

    return make


def turn(n: int = 1, *, mode: str | None = None, **options: Any) -> Turn:
    prompt = PROMPT
    if mode is not None:
        prompt = dataclasses.replace(PROMPT, task=f"{PROMPT.task} fake-mode={mode}")
    return make_turn(round=n, prompt=prompt, **options)


async def next_report(ready: ReadyListener, call: asyncio.Future[Any]) -> list[str]:
    return (await ready.next_line(unless=call)).split()


async def test_reply_thread_and_resume(codex: MakeRuntime, ready: ReadyListener) -> None:
    runtime = codex()
    assert runtime.model_route == "command:codex"
    call = asyncio.ensure_future(runtime.respond(turn()))
    assert (await next_report(ready, call))[0] == "login"
    _, _, thread, how = await next_report(ready, call)
    first = await call
    assert (first.text, how) == (HEARD, "new")
    assert first.runtime_state == {CODEX_THREAD_KEY: thread}
    call = asyncio.ensure_future(runtime.respond(turn(2, runtime_state=first.runtime_state)))
    # Logged in once is enough: the second turn goes straight to ``codex exec ... resume``.
    assert (await next_report(ready, call))[2:] == [thread, "resumed"]
    second = await call
    assert second.runtime_state == {CODEX_THREAD_KEY: thread}
    assert "resumed_fresh" not in second.timings


async def test_a_reconnect_before_turn_completed_is_not_a_failure(codex: MakeRuntime) -> None:
    result = await codex().respond(turn(mode="reconnect"))
    assert result.text == HEARD
    assert result.timings["reconnects"] == 1.0


async def test_a_failed_turn_keeps_its_cause(codex: MakeRuntime) -> None:
    with pytest.raises(RuntimeFailure) as caught:
        await codex().respond(turn(mode="fail"))
    failure = caught.value
    assert failure.reason == "error"
    assert "Codex failed the turn: unexpected status 401 Unauthorized" in failure.message
    assert "exit status 1" in failure.message
    assert failure.details["exit_code"] == 1


async def test_a_stale_thread_id_starts_a_fresh_thread_once(
    codex: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = codex()
    stale = {CODEX_THREAD_KEY: "0199a213-81c0-7800-8aa1-bbab2a035a53"}
    call = asyncio.ensure_future(runtime.respond(turn(runtime_state=stale)))
    assert (await next_report(ready, call))[0] == "login"
    # The resume attempt exits before any turn; the fresh run is the one that reports.
    _, _, thread, how = await next_report(ready, call)
    result = await call
    assert how == "new" and thread != stale[CODEX_THREAD_KEY]
    assert result.runtime_state == {CODEX_THREAD_KEY: thread}
    assert result.timings["resumed_fresh"] == 1.0


async def test_without_a_login_the_turn_fails_before_codex_exec_runs(
    codex: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = codex(env={"FAKE_CODEX_LOGGED_IN": "0"})
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(turn())
    failure = caught.value
    assert failure.reason == "error"
    assert "Codex is not logged in" in failure.message
    assert "'Not logged in'" in failure.message
    assert failure.details["exit_code"] == 1
    assert (await ready.next_line())[:5] == "login"
    assert ready.lines.empty()  # ``codex exec`` never started


async def test_a_key_in_the_environment_skips_the_login_check(
    codex: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = codex(env={"FAKE_CODEX_LOGGED_IN": "0", "CODEX_API_KEY": "sk-test"})
    call = asyncio.ensure_future(runtime.respond(turn()))
    assert (await next_report(ready, call))[0] == "turn"
    assert (await call).text == HEARD


async def test_codex_waiting_for_the_network_fails_before_the_deadline(
    codex: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = codex(max_network_waits=3)
    call = asyncio.ensure_future(runtime.respond(turn(mode="offline", timeout_s=60)))
    assert (await next_report(ready, call))[0] == "login"
    pid = int((await next_report(ready, call))[1])
    with pytest.raises(RuntimeFailure) as caught:
        await call
    failure = caught.value
    assert failure.reason == "error"
    assert "Codex cannot reach its model provider" in failure.message
    assert failure.details["network_waits"] == 3
    await wait_gone(pid)


async def test_cancel_stops_the_group_and_the_next_turn_resumes_the_thread(
    codex: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = codex()
    first = await runtime.respond(turn())
    assert first.runtime_state is not None
    thread = first.runtime_state[CODEX_THREAD_KEY]
    await ready.next_line()  # login
    await ready.next_line()  # the first turn
    cancel = asyncio.Event()
    call = asyncio.ensure_future(
        runtime.respond(turn(2, mode="hang", cancel=cancel, runtime_state=first.runtime_state))
    )
    _, pid, resumed, _ = await next_report(ready, call)
    assert resumed == thread
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"
    await wait_gone(int(pid))
    call = asyncio.ensure_future(runtime.respond(turn(3, runtime_state=first.runtime_state)))
    assert (await next_report(ready, call))[2:] == [thread, "resumed"]
    assert (await call).runtime_state == {CODEX_THREAD_KEY: thread}


async def test_the_thread_is_reported_when_codex_starts_it_and_a_cut_turn_is_resumed(
    codex: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = codex()
    cancel = asyncio.Event()
    reports = Reports()
    call = asyncio.ensure_future(
        runtime.respond(turn(mode="hang", cancel=cancel, state_sink=reports.sink))
    )
    assert (await next_report(ready, call))[0] == "login"
    _, pid, thread, how = await next_report(ready, call)
    assert how == "new"
    # thread.started is out, turn.completed never comes: the id is the caller's already.
    state = await reports.next(call)
    assert state == {CODEX_THREAD_KEY: thread}
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"
    await wait_gone(int(pid))
    call = asyncio.ensure_future(runtime.respond(turn(2, runtime_state=state)))
    assert (await next_report(ready, call))[2:] == [thread, "resumed"]
    assert (await call).runtime_state == state
