"""The openai and anthropic runtimes, through their real SDKs, against local fake servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

from parley.adapters.runtimes import guard
from parley.adapters.runtimes.anthropic import AnthropicRuntime
from parley.adapters.runtimes.factory import build_runtime
from parley.adapters.runtimes.openai import OpenAIRuntime
from parley.core.errors import ConfigError, RuntimeFailure
from parley.core.ports import Runtime
from parley.core.runtime import Usage
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.model_server import FakeModelServer, FakeReply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.turns import PROMPT, make_turn


@dataclass
class Provider:
    kind: str
    server: type[FakeModelServer]
    incomplete_stop: str
    status_error: type[Exception]


PROVIDERS = {
    "openai": Provider("openai", FakeOpenAIServer, "length", openai.APIStatusError),
    "anthropic": Provider("anthropic", FakeAnthropicServer, "max_tokens", anthropic.APIStatusError),
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> Provider:
    return PROVIDERS[request.param]


@pytest.fixture
async def server(provider: Provider) -> AsyncIterator[FakeModelServer]:
    async with provider.server() as fake:
        yield fake


MakeRuntime = Callable[..., Runtime]


def sent_key(headers: dict[str, str]) -> str:
    """The API key a request carried, in whichever header its SDK uses."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers["authorization"].removeprefix("Bearer ")


@pytest.fixture
async def make_runtime(provider: Provider, server: FakeModelServer) -> AsyncIterator[MakeRuntime]:
    built: list[Runtime] = []

    def make(**options: Any) -> Runtime:
        config = {
            "kind": provider.kind,
            "model": "fake-model",
            "base_url": server.base_url,  # type: ignore[attr-defined]
            "max_retries": 0,
            **options,
        }
        runtime = build_runtime(config)
        assert runtime is not None
        built.append(runtime)
        return runtime

    yield make
    for runtime in built:
        await runtime.aclose()


async def test_a_reply_carries_text_usage_and_route(
    provider: Provider, server: FakeModelServer, make_runtime: MakeRuntime
) -> None:
    server.script(FakeReply(text="I agree with the plan."))
    runtime = make_runtime(temperature=0.3, max_tokens=200, api_key="sk-agent")
    result = await runtime.respond(make_turn())
    assert result.text == "I agree with the plan."
    assert result.stop_reason == "completed"
    assert result.usage == Usage(input_tokens=42, output_tokens=7, model="fake-model")
    assert result.model_route == f"{provider.kind}:{server.base_url}:fake-model"  # type: ignore[attr-defined]
    assert "provider_wait_ms" in result.timings

    [sent] = server.requests
    assert sent["model"] == "fake-model"
    assert sent["temperature"] == 0.3
    assert sent["max_tokens"] == 200
    if provider.kind == "openai":
        assert sent["messages"] == [
            {"role": "system", "content": PROMPT.system},
            {"role": "user", "content": PROMPT.user_text()},
        ]
    else:
        assert sent["system"] == PROMPT.system
        assert sent["messages"] == [{"role": "user", "content": PROMPT.user_text()}]
    assert sent_key(server.headers[0]) == "sk-agent"


async def test_the_key_can_come_from_a_named_environment_variable(
    provider: Provider,
    server: FakeModelServer,
    make_runtime: MakeRuntime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PARLEY_TEST_AGENT_KEY", "sk-from-env")
    await make_runtime(api_key_env="PARLEY_TEST_AGENT_KEY").respond(make_turn())
    assert sent_key(server.headers[0]) == "sk-from-env"


async def test_a_missing_key_is_a_config_error(
    provider: Provider, make_runtime: MakeRuntime
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_runtime(api_key_env="PARLEY_TEST_NO_SUCH_KEY")
    assert caught.value.code == "missing_api_key"
    assert "PARLEY_TEST_NO_SUCH_KEY" in caught.value.message


async def test_a_non_completed_stop_is_a_failure(
    provider: Provider, server: FakeModelServer, make_runtime: MakeRuntime
) -> None:
    server.script(FakeReply(text="The plan is fine but", stop=provider.incomplete_stop))
    with pytest.raises(RuntimeFailure) as caught:
        await make_runtime().respond(make_turn())
    assert caught.value.reason == "stop_reason"
    assert caught.value.stop_reason == provider.incomplete_stop


@pytest.mark.parametrize("status", [500, 401, 429])
async def test_an_error_status_is_a_failure_with_the_sdk_error_chained(
    provider: Provider, server: FakeModelServer, make_runtime: MakeRuntime, status: int
) -> None:
    server.script(FakeReply(status=status, error_message="upstream exploded"))
    with pytest.raises(RuntimeFailure) as caught:
        await make_runtime().respond(make_turn())
    assert caught.value.reason == "error"
    assert caught.value.details["status"] == status
    assert "upstream exploded" in caught.value.message
    assert isinstance(caught.value.__cause__, provider.status_error)
    assert len(server.requests) == 1  # max_retries=0: no second attempt


async def test_retries_are_configurable(server: FakeModelServer, make_runtime: MakeRuntime) -> None:
    server.script(FakeReply(status=500, headers={"retry-after-ms": "1"}), FakeReply(text="ok now"))
    result = await make_runtime(max_retries=1).respond(make_turn())
    assert result.text == "ok now"
    assert len(server.requests) == 2


async def test_an_empty_reply_is_a_failure(
    server: FakeModelServer, make_runtime: MakeRuntime
) -> None:
    server.script(FakeReply(text=""))
    with pytest.raises(RuntimeFailure) as caught:
        await make_runtime().respond(make_turn())
    assert caught.value.reason == "empty"


async def test_a_hanging_server_ends_in_timeout(
    server: FakeModelServer, make_runtime: MakeRuntime
) -> None:
    server.script(FakeReply(hang=True))
    with pytest.raises(RuntimeFailure) as caught:
        await make_runtime().respond(make_turn(timeout_s=0.5))
    assert caught.value.reason == "timeout"
    assert server.received.is_set()


async def test_the_agent_timeout_caps_the_turn_timeout(
    server: FakeModelServer, make_runtime: MakeRuntime
) -> None:
    server.script(FakeReply(hang=True))
    with pytest.raises(RuntimeFailure) as caught:
        await make_runtime(timeout_s=0.5).respond(make_turn(timeout_s=600))
    assert caught.value.reason == "timeout"


async def test_cancel_mid_call_ends_in_cancelled(
    server: FakeModelServer, make_runtime: MakeRuntime
) -> None:
    server.script(FakeReply(hang=True))
    cancel = asyncio.Event()
    call = asyncio.create_task(make_runtime().respond(make_turn(cancel=cancel)))
    await server.received.wait()
    cancel.set()
    with pytest.raises(RuntimeFailure) as caught:
        await call
    assert caught.value.reason == "cancelled"


async def test_the_runtime_keeps_working_after_a_cancelled_call(
    server: FakeModelServer, make_runtime: MakeRuntime
) -> None:
    runtime = make_runtime()
    server.script(FakeReply(hang=True), FakeReply(text="second"))
    cancel = asyncio.Event()
    call = asyncio.create_task(runtime.respond(make_turn(cancel=cancel)))
    await server.received.wait()
    cancel.set()
    with pytest.raises(RuntimeFailure):
        await call
    assert (await runtime.respond(make_turn())).text == "second"


@pytest.mark.parametrize("runtime_class", [OpenAIRuntime, AnthropicRuntime])
def test_real_endpoints_are_blocked_in_tests(runtime_class: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        runtime_class.from_config({"model": "m", "base_url": "https://api.example.com/v1"})
    assert caught.value.code == "model_requests_blocked"
    with pytest.raises(ConfigError):
        runtime_class.from_config({"model": "m"})  # the provider's default endpoint


@pytest.mark.parametrize("runtime_class", [OpenAIRuntime, AnthropicRuntime])
async def test_real_endpoints_can_be_allowed_explicitly(
    runtime_class: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "ALLOW_MODEL_REQUESTS", True)
    runtime = runtime_class.from_config({"model": "m", "base_url": "https://api.example.com/v1"})
    assert runtime.model_route.endswith("api.example.com/v1:m")
    await runtime.aclose()
