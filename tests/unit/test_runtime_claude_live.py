"""One live Claude Code process per logical session (W9), against the fake Claude Code run as a
real subprocess: reuse across turns, interrupt without losing the process, the timeout and the
unanswered interrupt that stop the group, a stale session id, idle close and ``aclose``."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes.claude_code import CLAUDE_SESSION_KEY
from parley.adapters.runtimes.command import CommandConfig, CommandRuntime
from parley.adapters.runtimes.endpoint import parse_config
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Turn, TurnInput
from tests.fakes.processes import is_gone, wait_gone
from tests.fakes.ready import ReadyListener
from tests.fakes.turns import PROMPT, Reports, make_turn

FAKE_CLAUDE = str(Path(__file__).resolve().parent.parent / "fakes" / "fake_claude.py")
HEARD = f"heard: {PROMPT.render().strip().splitlines()[-1]}"

MakeRuntime = Callable[..., CommandRuntime]


class FakeClock:
    """A monotonic clock the test moves by hand, for idle close."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


@pytest.fixture
async def claude(ready: ReadyListener, tmp_path: Path) -> AsyncIterator[MakeRuntime]:
    """Build kept-alive runtimes on the fake Claude Code; every one is closed at the end."""
    built: list[CommandRuntime] = []

    def make(
        mode: str = "reply",
        *,
        clock: FakeClock | None = None,
        env_queue: bool = False,
        replay: bool = False,
        **options: Any,
    ) -> CommandRuntime:
        env = {"FAKE_READY_PORT": str(ready.port), "FAKE_CLAUDE_HOME": str(tmp_path)}
        if env_queue:
            env["FAKE_CLAUDE_QUEUE"] = "1"
        config = parse_config(
            CommandConfig,
            {
                "kind": "command",
                "argv": [sys.executable, FAKE_CLAUDE, mode]
                + (["--replay-user-messages"] if replay else []),
                "protocol": "claude-stream-json",
                "env": env,
                **options,
            },
        )
        runtime = CommandRuntime(config, clock=clock) if clock else CommandRuntime(config)
        built.append(runtime)
        return runtime

    yield make
    for runtime in built:
        await runtime.aclose()


async def reported_turn(ready: ReadyListener, call: asyncio.Future[Any]) -> tuple[int, int, str]:
    """The fake's ``turn <pid> <n> <session>`` report: which process took the turn, its count
    of turns in that process, and the session."""
    kind, pid, number, session = (await ready.next_line(unless=call)).split()
    assert kind == "turn"
    return int(pid), int(number), session


def turn(agent: str = "alice", n: int = 1, **options: Any) -> Turn:
    return make_turn(agent, round=n, **options)


async def test_one_process_serves_every_turn_of_a_session(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude()
    assert runtime.sessions is not None  # kept alive by default for claude-stream-json
    first_call = asyncio.ensure_future(runtime.respond(turn(n=1)))
    pid, number, session = await reported_turn(ready, first_call)
    first = await first_call
    assert (first.text, number) == (HEARD, 1)
    assert first.runtime_state == {CLAUDE_SESSION_KEY: session}
    assert runtime.live_pid("s-alice") == pid

    second_call = asyncio.ensure_future(
        runtime.respond(turn(n=2, runtime_state=first.runtime_state))
    )
    # The same process took the second frame, as its second turn, in the same session.
    assert await reported_turn(ready, second_call) == (pid, 2, session)
    second = await second_call
    assert second.text == HEARD
    assert second.runtime_state == {CLAUDE_SESSION_KEY: session}

    # Another logical session has its own process and its own Claude Code session.
    other_call = asyncio.ensure_future(runtime.respond(turn("bob")))
    other_pid, _, other_session = await reported_turn(ready, other_call)
    await other_call
    assert other_pid != pid and other_session != session
    assert runtime.live_pid("s-bob") == other_pid and runtime.live_pid("s-alice") == pid


async def test_a_cancelled_turn_is_interrupted_and_the_session_goes_on(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude("slow")
    cancel = asyncio.Event()
    first = make_turn(cancel=cancel, round=1)
    call = asyncio.ensure_future(runtime.respond(first))
    pid, _, session = await reported_turn(ready, call)  # mid-turn: a partial message is out
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    failure = caught.value
    assert failure.reason == "cancelled"
    assert failure.details["interrupt_answered"] is True
    assert failure.details["interrupt_ms"] >= 0
    assert await ready.next_line() == f"interrupted parley-{first.invocation_id}"
    # The process stays, and the next turn continues the same session in it.
    assert not is_gone(pid) and runtime.live_pid("s-alice") == pid
    state = {CLAUDE_SESSION_KEY: session}
    call = asyncio.ensure_future(runtime.respond(turn(n=2, runtime_state=state)))
    assert await reported_turn(ready, call) == (pid, 2, session)
    await ready.tell("go")  # the barrier the slow fake waits on
    result = await call
    assert result.text == HEARD
    assert result.runtime_state == state


async def test_the_session_is_reported_at_init_of_each_turn_before_its_result(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude("slow")
    reports = Reports()
    call = asyncio.ensure_future(runtime.respond(make_turn(state_sink=reports.sink)))
    _, _, session = await reported_turn(ready, call)
    assert await reports.next(call) == {CLAUDE_SESSION_KEY: session}
    assert not call.done()
    await ready.tell("go")
    assert (await call).runtime_state == {CLAUDE_SESSION_KEY: session}
    assert reports.rest() == []
    # The next turn in the same process reports it again (the keeper writes new values only).
    state = {CLAUDE_SESSION_KEY: session}
    call = asyncio.ensure_future(
        runtime.respond(turn(n=2, runtime_state=state, state_sink=reports.sink))
    )
    await reported_turn(ready, call)
    assert await reports.next(call) == state
    await ready.tell("go")
    await call


async def test_a_timeout_kills_the_group_and_the_next_turn_resumes(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude("slow")
    call = asyncio.ensure_future(runtime.respond(turn(timeout_s=3)))
    pid, _, session = await reported_turn(ready, call)
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "timeout"
    await wait_gone(pid)
    assert runtime.live_pid("s-alice") is None
    # No process: the next turn starts one that resumes the session by id.
    call = asyncio.ensure_future(
        runtime.respond(turn(n=2, runtime_state={CLAUDE_SESSION_KEY: session}))
    )
    new_pid, number, resumed = await reported_turn(ready, call)
    await ready.tell("go")
    result = await call
    assert (new_pid != pid, number, resumed) == (True, 1, session)
    assert "resumed_fresh" not in result.timings


async def test_a_process_that_does_not_answer_the_interrupt_is_stopped(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude("deaf", kill_grace_s=0.2)
    cancel = asyncio.Event()
    call = asyncio.ensure_future(runtime.respond(turn(cancel=cancel)))
    pid, _, _ = await reported_turn(ready, call)
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"
    assert caught.value.details["interrupt_answered"] is False
    await wait_gone(pid)
    assert runtime.live_pid("s-alice") is None


async def test_a_stale_session_id_starts_a_fresh_session_once(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude()
    stale = {CLAUDE_SESSION_KEY: "6f0c3b7e-0000-4000-8000-000000000000"}
    call = asyncio.ensure_future(runtime.respond(turn(runtime_state=stale)))
    # The process started with --resume=<stale id> exits before taking a turn; the fresh one
    # takes it.
    pid, number, session = await reported_turn(ready, call)
    result = await call
    assert result.text == HEARD
    assert result.timings["resumed_fresh"] == 1.0
    assert result.runtime_state == {CLAUDE_SESSION_KEY: session}
    assert session != stale[CLAUDE_SESSION_KEY] and number == 1
    # The fresh session is kept: the next turn goes to the same process, nothing dropped.
    call = asyncio.ensure_future(runtime.respond(turn(n=2, runtime_state=result.runtime_state)))
    assert await reported_turn(ready, call) == (pid, 2, session)
    assert "resumed_fresh" not in (await call).timings


async def test_an_error_result_fails_the_turn_and_keeps_the_process(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude("error")
    call = asyncio.ensure_future(runtime.respond(turn()))
    pid, _, _ = await reported_turn(ready, call)
    with pytest.raises(RuntimeFailure) as caught:
        await call
    failure = caught.value
    assert (failure.reason, failure.stop_reason) == ("error", "success")
    assert failure.message.startswith("Claude Code reported an error: API Error: 529 overloaded")
    assert failure.details["api_error_status"] == 529
    assert runtime.live_pid("s-alice") == pid and not is_gone(pid)


async def test_a_process_that_exits_mid_turn_fails_with_its_exit_status_and_stderr(
    claude: MakeRuntime,
) -> None:
    runtime = claude("crash")
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(turn())
    failure = caught.value
    assert failure.reason == "error"
    assert failure.details["exit_code"] == 2
    assert "the session store is corrupt" in failure.details["stderr_tail"]
    assert "exit status 2" in failure.message
    assert "the session store is corrupt" in failure.message
    assert runtime.live_pid("s-alice") is None


async def test_idle_processes_are_closed_and_resumed_later(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    clock = FakeClock()
    runtime = claude(clock=clock, idle_s=600)
    alice_call = asyncio.ensure_future(runtime.respond(turn("alice")))
    alice_pid, _, alice_session = await reported_turn(ready, alice_call)
    await alice_call
    clock.now += 500
    bob_call = asyncio.ensure_future(runtime.respond(turn("bob")))
    bob_pid, _, _ = await reported_turn(ready, bob_call)
    await bob_call

    clock.now += 100  # alice unused for 600 s, bob for 100 s
    assert await runtime.close_idle() == ["s-alice"]
    await wait_gone(alice_pid)
    assert not is_gone(bob_pid) and runtime.live_pid("s-bob") == bob_pid

    # alice's next turn starts a process that resumes her session.
    state = {CLAUDE_SESSION_KEY: alice_session}
    call = asyncio.ensure_future(runtime.respond(turn("alice", 2, runtime_state=state)))
    new_pid, number, session = await reported_turn(ready, call)
    await call
    assert (new_pid != alice_pid, number, session) == (True, 1, alice_session)

    clock.now += 599
    assert await runtime.close_idle() == ["s-bob"]
    await wait_gone(bob_pid)
    assert runtime.live_pid("s-alice") == new_pid


async def test_the_idle_timer_closes_an_unused_process_by_itself(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude(idle_s=0.05)
    call = asyncio.ensure_future(runtime.respond(turn()))
    pid, _, _ = await reported_turn(ready, call)
    await call
    await wait_gone(pid)  # nobody calls close_idle: the timer armed after the turn does
    assert runtime.live_pid("s-alice") is None


async def test_aclose_stops_every_live_process(claude: MakeRuntime, ready: ReadyListener) -> None:
    runtime = claude()
    pids = []
    for agent in ("alice", "bob"):
        call = asyncio.ensure_future(runtime.respond(turn(agent)))
        pids.append((await reported_turn(ready, call))[0])
        await call
    await runtime.aclose()
    await wait_gone(*pids)
    assert runtime.live_pid("s-alice") is None and runtime.live_pid("s-bob") is None


async def test_a_turn_cancelled_before_it_starts_sends_nothing(claude: MakeRuntime) -> None:
    runtime = claude()
    cancel = asyncio.Event()
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(turn(cancel=cancel))
    assert caught.value.reason == "cancelled"
    assert runtime.live_pid("s-alice") is None


async def test_a_message_pushed_into_a_live_turn_is_taken_before_its_answer(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    runtime = claude("slow", replay=True)
    live = TurnInput()
    call = asyncio.ensure_future(runtime.respond(turn(n=1, live_input=live)))
    pid, _, _ = await reported_turn(ready, call)
    assert live.is_open
    assert await live.push("<pending_mail>\nKeep the API.\n</pending_mail>")
    assert (await ready.next_line(unless=call)).split()[:2] == ["mail", str(pid)]
    await ready.tell("go")
    result = await call
    assert result.text == f"{HEARD} + 1 more"
    # The turn is over: its input is closed and a push is refused (the next turn reads it).
    assert not live.is_open
    assert not await live.push("too late")


async def test_a_message_claude_code_queues_is_answered_before_the_turn_ends(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    # Claude Code may run a message that came too late for the running turn as a turn of its
    # own: the first result comes before the message's echo, and is not the turn's answer.
    runtime = claude("slow", replay=True, env_queue=True)
    live = TurnInput()
    call = asyncio.ensure_future(runtime.respond(turn(n=1, live_input=live)))
    await reported_turn(ready, call)
    assert await live.push("a note\nKeep the API.")
    assert (await ready.next_line(unless=call)).split()[0] == "queued"
    await ready.tell("go")
    # The turn's own result is out, then the message's echo; its answer comes on "go".
    assert (await ready.next_line(unless=call)).split()[0] == "mail"
    await ready.tell("go")
    assert (await call).text == "heard: Keep the API."
    # Nothing of it is left over to answer the next turn.
    second = asyncio.ensure_future(runtime.respond(turn(n=2)))
    await reported_turn(ready, second)
    await ready.tell("go")
    assert (await second).text == HEARD


@pytest.mark.parametrize("when", ["between turns", "while the next turn waits"])
async def test_a_message_queued_before_an_interrupt_never_answers_a_later_turn(
    claude: MakeRuntime, ready: ReadyListener, when: str
) -> None:
    # Mail pushed into a turn that Claude Code queued, then a cancel (or a takeover): Claude
    # Code answers the message in a turn of its own after the interrupt. That result is not
    # the next turn's answer, whether it came before the next turn's frame or after it.
    runtime = claude("slow", replay=True, env_queue=True)
    live = TurnInput()
    cancel = asyncio.Event()
    first = make_turn(cancel=cancel, round=1, live_input=live)
    call = asyncio.ensure_future(runtime.respond(first))
    pid, _, session = await reported_turn(ready, call)
    assert await live.push("a note\nKeep the API.")
    assert (await ready.next_line(unless=call)).split()[0] == "queued"
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"
    assert await ready.next_line() == f"interrupted parley-{first.invocation_id}"
    assert (await ready.next_line()).split()[:2] == ["mail", str(pid)]
    state = {CLAUDE_SESSION_KEY: session}
    if when == "between turns":
        await ready.tell("go")
        assert await ready.next_line() == f"answered {pid}"
        second = asyncio.ensure_future(runtime.respond(turn(n=2, runtime_state=state)))
    else:
        second = asyncio.ensure_future(runtime.respond(turn(n=2, runtime_state=state)))
        assert await ready.next_line(unless=second) == f"held {pid}"
        await ready.tell("go")
        assert await ready.next_line(unless=second) == f"answered {pid}"
    assert await reported_turn(ready, second) == (pid, 2, session)
    await ready.tell("go")
    assert (await second).text == HEARD
    # And the turn after it is answered by its own result too.
    third = asyncio.ensure_future(runtime.respond(turn(n=3, runtime_state=state)))
    assert await reported_turn(ready, third) == (pid, 3, session)
    await ready.tell("go")
    assert (await third).text == HEARD


async def test_ending_a_session_waits_for_a_stop_already_under_way(
    claude: MakeRuntime, ready: ReadyListener
) -> None:
    # A worker that ends is ended twice: once after the commit that ends it, once by the
    # cancel that waits for its processes. The second must not return while the first is
    # still stopping the process it took out of the pool.
    runtime = claude()
    call = asyncio.ensure_future(runtime.respond(turn(n=1)))
    pid, _, _ = await reported_turn(ready, call)
    await call
    first = asyncio.ensure_future(runtime.end_session("s-alice"))
    second = asyncio.ensure_future(runtime.end_session("s-alice"))
    await second
    assert is_gone(pid)
    await first
