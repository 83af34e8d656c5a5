"""Building runtimes from agent configs, and reusing them per agent."""

from __future__ import annotations

from typing import Any

import pytest

from parley.adapters.runtimes.factory import (
    RuntimeRegistry,
    build_runtime,
    validate_runtime_config,
)
from parley.adapters.runtimes.openai import OpenAIRuntime
from parley.core.errors import InvalidRequest, RuntimeFailure
from parley.core.runtime import Turn, TurnResult
from tests.fakes.turns import make_turn


@pytest.mark.parametrize("config", [{"kind": "none"}, {"kind": "remote"}, {}])
def test_none_and_remote_have_no_runtime_object(config: dict[str, Any]) -> None:
    assert build_runtime(config) is None


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        build_runtime({"kind": "telepathy"})
    assert caught.value.code == "unknown_runtime"
    assert "'telepathy'" in caught.value.message


def test_a_missing_model_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        build_runtime({"kind": "openai", "base_url": "http://127.0.0.1:9/v1"})
    assert caught.value.code == "invalid_runtime_config"
    assert "model" in caught.value.message


async def test_an_http_runtime_is_built_without_calling_anything() -> None:
    runtime = build_runtime(
        {"kind": "openai", "model": "llama3", "base_url": "http://localhost:11434/v1/"}
    )
    assert isinstance(runtime, OpenAIRuntime)
    assert runtime.model_route == "openai:http://localhost:11434/v1:llama3"
    await runtime.aclose()


class Closable:
    kind = "scripted"

    def __init__(self) -> None:
        self.closed = False

    async def respond(self, turn: Turn) -> TurnResult:
        return TurnResult(text="x")

    async def aclose(self) -> None:
        self.closed = True


async def test_the_registry_reuses_runtimes_until_the_config_changes() -> None:
    built: list[Closable] = []

    def build(config: dict[str, Any]) -> Closable:
        built.append(Closable())
        return built[-1]

    registry = RuntimeRegistry(build)
    first = registry.get("alice", {"kind": "scripted", "replies": ["a"]})
    assert isinstance(first, Closable)
    assert registry.get("alice", {"replies": ["a"], "kind": "scripted"}) is first
    assert registry.get("bob", {"kind": "scripted", "replies": ["a"]}) is not first
    changed = registry.get("alice", {"kind": "scripted", "replies": ["b"]})
    assert changed is not first
    assert not first.closed  # it may still be answering a turn
    await registry.aclose()
    assert all(runtime.closed for runtime in built)


async def test_a_scripted_runtime_keeps_its_place_across_gets() -> None:
    registry = RuntimeRegistry()
    config = {"kind": "scripted", "replies": ["first", "second"]}
    first = registry.get("alice", config)
    second = registry.get("alice", config)
    assert first is not None and second is not None
    assert (await first.respond(make_turn())).text == "first"
    assert (await second.respond(make_turn())).text == "second"
    assert registry.get("carol", {"kind": "none"}) is None
    await registry.aclose()


def test_configs_can_be_validated_without_building() -> None:
    validate_runtime_config({"kind": "command", "preset": "claude-code"})  # guard not involved
    validate_runtime_config({"kind": "remote"})
    with pytest.raises(InvalidRequest) as caught:
        validate_runtime_config({"kind": "anthropic", "model": "m", "max_tokens": 0})
    assert "max_tokens" in caught.value.message


async def test_an_unbuildable_config_fails_its_turns_instead_of_crashing_the_hub() -> None:
    registry = RuntimeRegistry()
    runtime = registry.get("alice", {"kind": "openai", "model": "gpt", "base_url": "https://x.io"})
    assert runtime is not None
    with pytest.raises(RuntimeFailure) as caught:
        await runtime.respond(make_turn())
    assert caught.value.reason == "error"
    assert "model requests are blocked" in caught.value.message
    await registry.aclose()
