"""The ``openai`` runtime: any OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, vLLM,
DeepSeek, OpenRouter, ...) through the official ``openai`` SDK, with the hub's tools offered
through function calling when the turn carries them."""

from __future__ import annotations

import os
from typing import Any

import openai

from parley.adapters.runtimes import guard
from parley.adapters.runtimes.endpoint import EndpointConfig, parse_config
from parley.adapters.runtimes.race import ProviderReply, deadline_for, race_turn
from parley.adapters.runtimes.tooling import ToolRounds, call_tool, system_text
from parley.core.errors import ConfigError, RuntimeFailure
from parley.core.redact import redact_text, scrub
from parley.core.runtime import ToolBox, Turn, TurnResult

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIConfig(EndpointConfig):
    """``{"kind": "openai", "model": ..., "base_url": ..., "api_key": ..., "temperature": ...,
    "timeout_s": ..., "max_tokens": ..., "max_retries": ...}``"""


class OpenAIRuntime:
    """One agent's Chat Completions client; the prompt goes as a system and a user message."""

    kind = "openai"

    def __init__(self, config: OpenAIConfig) -> None:
        self.config = config
        self.base_url = (
            config.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        ).rstrip("/")
        guard.check_endpoint(self.kind, self.base_url)
        # The route is shown to the channel's members: never with the URL's userinfo.
        self.model_route = f"openai:{redact_text(self.base_url)}:{config.model}"
        api_key = config.resolve_api_key(self.kind, "OPENAI_API_KEY")
        self._secrets = (api_key,)
        try:
            self._client = openai.AsyncOpenAI(
                api_key=api_key, base_url=self.base_url, max_retries=config.max_retries
            )
        except openai.OpenAIError as exc:
            raise ConfigError(
                f"cannot create an OpenAI client for {redact_text(self.base_url)!r}: "
                f"{scrub(str(exc), self._secrets)}",
                code="runtime_config_error",
            ) from exc

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> OpenAIRuntime:
        return cls(parse_config(OpenAIConfig, config))

    async def respond(self, turn: Turn) -> TurnResult:
        deadline_s = deadline_for(turn, self.config.timeout_s)
        return await race_turn(
            turn,
            lambda: self._complete(turn, deadline_s),
            route=self.model_route,
            timeout_s=deadline_s,
            secrets=self._secrets,
        )

    async def _complete(self, turn: Turn, deadline_s: float) -> ProviderReply:
        """Ask the model; while it calls tools (at most the toolbox's rounds), run them and
        send their results back. Its final message is the turn's answer."""
        tools = turn.tools
        options: dict[str, Any] = {}
        if self.config.temperature is not None:
            options["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            options["max_tokens"] = self.config.max_tokens
        if tools is not None:
            options["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": spec.parameters,
                    },
                }
                for spec in tools.specs()
            ]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_text(turn.prompt, tools)},
            {"role": "user", "content": turn.prompt.user_text()},
        ]
        rounds = ToolRounds(self.model_route, tools)
        try:
            while True:
                completion = await self._create(messages, deadline_s, options)
                if completion.usage is not None:
                    details = completion.usage.prompt_tokens_details
                    rounds.used(
                        completion.usage.prompt_tokens,
                        completion.usage.completion_tokens,
                        model=str(completion.model or self.config.model),
                        cache_read=int(getattr(details, "cached_tokens", None) or 0),
                    )
                if not completion.choices:
                    raise RuntimeFailure(f"{self.model_route} returned no choices", reason="empty")
                choice = completion.choices[0]
                calls = choice.message.tool_calls
                if tools is not None and calls:
                    rounds.next()
                    messages.extend(await self._run_calls(tools, choice.message.content, calls))
                    continue
                if choice.finish_reason != "stop":
                    raise RuntimeFailure(
                        f"{self.model_route} stopped with finish_reason {choice.finish_reason!r}, "
                        "not 'stop'; the reply is incomplete",
                        reason="stop_reason",
                        stop_reason=str(choice.finish_reason),
                    )
                return ProviderReply(text=choice.message.content or "", usage=rounds.usage)
        except RuntimeFailure as failure:
            # A turn that fails after some calls to the model still paid for them.
            failure.charged(rounds.usage)
            raise

    async def _create(
        self, messages: list[dict[str, Any]], deadline_s: float, options: dict[str, Any]
    ) -> Any:
        try:
            return await self._client.chat.completions.create(
                model=self.config.model,
                messages=messages,  # type: ignore[arg-type]
                # The SDK's own timeout backs up the race, so a hung socket is closed too.
                timeout=deadline_s,
                **options,
            )
        except openai.APITimeoutError as exc:
            raise RuntimeFailure(
                f"{self.model_route} did not answer within {deadline_s:g} s", reason="timeout"
            ) from exc
        except openai.APIStatusError as exc:
            raise RuntimeFailure(
                f"{self.model_route} answered HTTP {exc.status_code}: {exc.message}",
                reason="error",
                status=exc.status_code,
            ) from exc
        except openai.APIError as exc:
            raise RuntimeFailure(f"{self.model_route} failed: {exc}", reason="error") from exc

    @staticmethod
    async def _run_calls(
        tools: ToolBox, content: str | None, calls: list[Any]
    ) -> list[dict[str, Any]]:
        """The assistant message that asked for ``calls`` and one tool message per call, in
        order: the model reads each result, a refusal too, and goes on."""
        asked = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in calls
            if c.type == "function"
        ]
        replies: list[dict[str, Any]] = [
            {"role": "assistant", "content": content, "tool_calls": asked}
        ]
        for c in calls:
            if c.type != "function":
                text = f"unknown_tool: only function tools are offered, not {c.type!r}"
            else:
                text = (await call_tool(tools, c.function.name, c.function.arguments)).text
            replies.append({"role": "tool", "tool_call_id": c.id, "content": text})
        return replies

    async def aclose(self) -> None:
        await self._client.close()
