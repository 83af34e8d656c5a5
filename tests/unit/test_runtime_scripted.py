"""The scripted runtime, and through it the failure rules every runtime shares (W9)."""

from __future__ import annotations

import asyncio

import pytest

from parley.adapters.runtimes.factory import build_runtime
from parley.adapters.runtimes.race import ProviderReply, race_turn
from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.errors import InvalidRequest, RuntimeFailure
from parley.core.runtime import NO_REPLY, Turn
from tests.fakes.turns import PROMPT, make_turn


async def replies(runtime: ScriptedRuntime, *turns: Turn) -> list[str]:
    return [(await runtime.respond(turn)).text for turn in turns]


async def test_a_list_script_gives_each_agent_its_own_cursor() -> None:
    runtime = ScriptedRuntime(["one", "two"])
    got = await replies(
        runtime, make_turn("alice"), make_turn("bob"), make_turn("alice"), make_turn("bob")
    )
    assert got == ["one", "one", "two", "two"]


async def test_an_exhausted_script_fails_instead_of_going_silent() -> None:
    runtime = ScriptedRuntime(["only"])
    await runtime.respond(make_turn())
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(make_turn())
    assert caught.value.reason == "error"
    assert "ran out of replies for agent 'alice'" in caught.value.message


async def test_a_cycling_script_starts_over() -> None:
    runtime = ScriptedRuntime(["a", "b"], cycle=True)
    assert await replies(runtime, *[make_turn() for _ in range(5)]) == ["a", "b", "a", "b", "a"]


async def test_a_mapping_script_is_per_agent_and_refuses_unknown_agents() -> None:
    runtime = ScriptedRuntime({"alice": ["hi from alice"], "bob": ["hi from bob"]})
    assert await replies(runtime, make_turn("bob"), make_turn("alice")) == [
        "hi from bob",
        "hi from alice",
    ]
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(make_turn("carol"))
    assert "no script for agent 'carol'" in caught.value.message


async def test_same_script_same_replies() -> None:
    def run() -> list[Turn]:
        return [make_turn(agent, round=r) for r in (1, 2) for agent in ("alice", "bob")]

    first = await replies(ScriptedRuntime({"alice": ["x", "y"], "bob": ["p", NO_REPLY]}), *run())
    second = await replies(ScriptedRuntime({"alice": ["x", "y"], "bob": ["p", NO_REPLY]}), *run())
    assert first == second == ["x", "p", "y", NO_REPLY]


async def test_a_function_script_sees_the_turn_and_may_await() -> None:
    async def reply(turn: Turn) -> str:
        return f"{turn.agent.id} read {len(turn.prompt.transcript)} message(s)"

    runtime = ScriptedRuntime(reply)
    assert (await runtime.respond(make_turn("bob"))).text == "bob read 1 message(s)"
    sync = ScriptedRuntime(lambda turn: turn.prompt.task.upper())
    assert (await sync.respond(make_turn())).text == PROMPT.task.upper()
    assert [t.agent.id for t in runtime.turns] == ["bob"]


async def test_success_is_labelled_scripted_and_timed() -> None:
    result = await ScriptedRuntime(["fine"]).respond(make_turn())
    assert result.model_route == "scripted"
    assert result.stop_reason == "completed"
    assert "provider_wait_ms" in result.timings


async def test_no_reply_is_silence_but_an_empty_reply_is_a_failure() -> None:
    runtime = ScriptedRuntime([NO_REPLY, "", "  \n\t"])
    assert (await runtime.respond(make_turn())).is_silent
    for _ in range(2):
        with pytest.raises(RuntimeFailure) as caught:
            await runtime.respond(make_turn())
        assert caught.value.reason == "empty"
        assert caught.value.code == "runtime_empty"


async def test_a_hanging_step_ends_in_timeout() -> None:
    runtime = ScriptedRuntime.from_config({"kind": "scripted", "replies": [{"hang": True}]})
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(make_turn(timeout_s=0.05))
    assert caught.value.reason == "timeout"
    assert caught.value.details["model_route"] == "scripted"
    assert "provider_wait_ms" in caught.value.details["timings"]


async def test_cancel_during_the_call_ends_in_cancelled() -> None:
    started = asyncio.Event()

    async def reply(turn: Turn) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    cancel = asyncio.Event()
    call = asyncio.create_task(ScriptedRuntime(reply).respond(make_turn(cancel=cancel)))
    await started.wait()
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"


async def test_a_turn_cancelled_before_it_starts_is_not_played() -> None:
    cancel = asyncio.Event()
    cancel.set()
    calls: list[Turn] = []

    def reply(turn: Turn) -> str:
        calls.append(turn)
        return "x"

    runtime = ScriptedRuntime(reply)
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(make_turn(cancel=cancel))
    assert caught.value.reason == "cancelled"
    assert calls == []


async def test_timeout_wins_even_when_the_provider_ignores_cancellation() -> None:
    release = asyncio.Event()
    cancelled_at_least_once = asyncio.Event()

    async def stubborn() -> ProviderReply:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancelled_at_least_once.set()  # and carry on regardless
        return ProviderReply(text="too late")

    with pytest.raises(RuntimeFailure) as caught:
        await race_turn(make_turn(timeout_s=0.05), stubborn, route="stubborn", grace_s=0.01)
    assert caught.value.reason == "timeout"
    assert cancelled_at_least_once.is_set()
    release.set()  # let the abandoned call finish before the loop closes


async def test_provider_errors_become_runtime_failures_with_the_cause_chained() -> None:
    async def broken() -> ProviderReply:
        raise ValueError("bad wire")

    with pytest.raises(RuntimeFailure) as caught:
        await race_turn(make_turn(), broken, route="broken")
    assert caught.value.reason == "error"
    assert isinstance(caught.value.__cause__, ValueError)


async def test_scripted_failures_and_rounds_from_config() -> None:
    runtime = build_runtime(
        {
            "kind": "scripted",
            "replies": ["list reply", {"fail": "stop_reason"}],
            "replies_by_round": {"2": "round two"},
        }
    )
    assert isinstance(runtime, ScriptedRuntime)
    assert (await runtime.respond(make_turn(round=2))).text == "round two"
    assert (await runtime.respond(make_turn(round=1))).text == "list reply"
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(make_turn(round=3))
    assert caught.value.reason == "stop_reason"


def test_a_bad_scripted_config_is_refused_clearly() -> None:
    with pytest.raises(InvalidRequest) as caught:
        build_runtime({"kind": "scripted", "replies": [{"fail": "sometimes"}], "colour": 1})
    assert caught.value.code == "invalid_runtime_config"
    assert "colour" in caught.value.message
