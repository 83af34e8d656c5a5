"""The ``anthropic`` runtime: the Messages API through the official ``anthropic`` SDK, with the
hub's tools offered as tool definitions when the turn carries them."""

from __future__ import annotations

import os
from typing import Any

import anthropic
from pydantic import Field

from parley.adapters.runtimes import guard
from parley.adapters.runtimes.endpoint import EndpointConfig, parse_config
from parley.adapters.runtimes.race import ProviderReply, deadline_for, race_turn
from parley.adapters.runtimes.tooling import ToolRounds, call_tool, system_text
from parley.core.errors import ConfigError, RuntimeFailure
from parley.core.redact import redact_text, scrub
from parley.core.runtime import ToolBox, Turn, TurnResult

DEFAULT_BASE_URL = "https://api.anthropic.com"
COMPLETED_STOPS = frozenset({"end_turn", "stop_sequence"})


class AnthropicConfig(EndpointConfig):
    """``{"kind": "anthropic", "model": ..., "base_url": ..., "api_key": ..., "temperature": ...,
    "timeout_s": ..., "max_tokens": ..., "max_retries": ...}``; ``max_tokens`` is required by the
    API, so it defaults to 1024."""

    max_tokens: int | None = Field(default=1024, gt=0)


class AnthropicRuntime:
    """One agent's Messages API client; the prompt goes as the system parameter and one user
    message."""

    kind = "anthropic"

    def __init__(self, config: AnthropicConfig) -> None:
        self.config = config
        self.base_url = (
            config.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        ).rstrip("/")
        guard.check_endpoint(self.kind, self.base_url)
        # The route is shown to the channel's members: never with the URL's userinfo.
        self.model_route = f"anthropic:{redact_text(self.base_url)}:{config.model}"
        api_key = config.resolve_api_key(self.kind, "ANTHROPIC_API_KEY")
        self._secrets = (api_key,)
        try:
            self._client = anthropic.AsyncAnthropic(
                api_key=api_key, base_url=self.base_url, max_retries=config.max_retries
            )
        except anthropic.AnthropicError as exc:
            raise ConfigError(
                f"cannot create an Anthropic client for {redact_text(self.base_url)!r}: "
                f"{scrub(str(exc), self._secrets)}",
                code="runtime_config_error",
            ) from exc

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> AnthropicRuntime:
        return cls(parse_config(AnthropicConfig, config))

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
        """Ask the model; while it stops for tool use (at most the toolbox's rounds), run the
        calls and send their results back. Its final message is the turn's answer."""
        tools = turn.tools
        extra: dict[str, Any] = {}
        if self.config.temperature is not None:
            extra["temperature"] = self.config.temperature
        options: dict[str, Any] = {}
        if tools is not None:
            options["tools"] = [
                {"name": s.name, "description": s.description, "input_schema": s.parameters}
                for s in tools.specs()
            ]
        messages: list[dict[str, Any]] = [{"role": "user", "content": turn.prompt.user_text()}]
        system = system_text(turn.prompt, tools)
        rounds = ToolRounds(self.model_route, tools)
        try:
            while True:
                message = await self._create(system, messages, deadline_s, extra, options)
                used = message.usage
                rounds.used(
                    used.input_tokens,
                    used.output_tokens,
                    model=str(message.model or self.config.model),
                    cache_read=int(getattr(used, "cache_read_input_tokens", None) or 0),
                    cache_write=int(getattr(used, "cache_creation_input_tokens", None) or 0),
                )
                if tools is not None and message.stop_reason == "tool_use":
                    rounds.next()
                    messages.extend(await self._run_calls(tools, message.content))
                    continue
                if message.stop_reason not in COMPLETED_STOPS:
                    raise RuntimeFailure(
                        f"{self.model_route} stopped with stop_reason {message.stop_reason!r}, "
                        "not 'end_turn'; the reply is incomplete",
                        reason="stop_reason",
                        stop_reason=str(message.stop_reason),
                    )
                text = "".join(block.text for block in message.content if block.type == "text")
                return ProviderReply(text=text, usage=rounds.usage)
        except RuntimeFailure as failure:
            # A turn that fails after some calls to the model still paid for them.
            failure.charged(rounds.usage)
            raise

    async def _create(
        self,
        system: str,
        messages: list[dict[str, Any]],
        deadline_s: float,
        extra: dict[str, Any],
        options: dict[str, Any],
    ) -> Any:
        try:
            return await self._client.messages.create(
                model=self.config.model,
                max_tokens=self.config.max_tokens or 1024,
                system=system,
                messages=messages,  # type: ignore[arg-type]
                timeout=deadline_s,
                extra_body=extra or None,
                **options,
            )
        except anthropic.APITimeoutError as exc:
            raise RuntimeFailure(
                f"{self.model_route} did not answer within {deadline_s:g} s", reason="timeout"
            ) from exc
        except anthropic.APIStatusError as exc:
            raise RuntimeFailure(
                f"{self.model_route} answered HTTP {exc.status_code}: {exc.message}",
                reason="error",
                status=exc.status_code,
            ) from exc
        except anthropic.APIError as exc:
            raise RuntimeFailure(f"{self.model_route} failed: {exc}", reason="error") from exc

    @staticmethod
    async def _run_calls(tools: ToolBox, content: list[Any]) -> list[dict[str, Any]]:
        """The assistant turn as the model sent it and one user turn with a result per
        ``tool_use`` block, in order: the model reads each result, a refusal too, and goes on."""
        said: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for block in content:
            if block.type == "text":
                said.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                said.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                )
                out = await call_tool(tools, block.name, block.input)
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": block.id,
                        "content": out.text,
                        "is_error": out.is_error,
                    }
                )
        return [{"role": "assistant", "content": said}, {"role": "user", "content": results}]

    async def aclose(self) -> None:
        await self._client.close()
