"""Build an agent's runtime from its stored config, and keep one runtime object per agent.

``none`` (the agent answers by itself, through mail or MCP) and ``remote`` (the hub offers the
turn and waits for a tool call, handled by the service layer) have no runtime object here.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from parley.adapters.runtimes.endpoint import parse_config
from parley.adapters.runtimes.race import scrub_failure
from parley.core.errors import InvalidRequest, ParleyError, RuntimeFailure
from parley.core.ports import Runtime
from parley.core.redact import scrub, secret_values
from parley.core.runtime import RUNTIME_KINDS, Turn, TurnResult

log = logging.getLogger(__name__)

# Each kind's module, runtime class and config class, imported on first use: the provider SDKs
# take most of a second to import, and a hub whose agents never use them should not pay it (Q7).
_ADAPTERS: dict[str, tuple[str, str, str]] = {
    "scripted": ("parley.adapters.runtimes.scripted", "ScriptedRuntime", "ScriptedConfig"),
    "openai": ("parley.adapters.runtimes.openai", "OpenAIRuntime", "OpenAIConfig"),
    "anthropic": ("parley.adapters.runtimes.anthropic", "AnthropicRuntime", "AnthropicConfig"),
    "command": ("parley.adapters.runtimes.command", "CommandRuntime", "CommandConfig"),
}


def _adapter_attr(kind: str, which: int) -> Any:
    module, *names = _ADAPTERS[kind]
    return getattr(importlib.import_module(module), names[which])


def _builder(kind: str) -> Callable[[dict[str, Any]], Runtime]:
    builder: Callable[[dict[str, Any]], Runtime] = _adapter_attr(kind, 0).from_config
    return builder


def _config_model(kind: str) -> type[BaseModel]:
    model: type[BaseModel] = _adapter_attr(kind, 1)
    return model


def validate_runtime_config(config: dict[str, Any]) -> None:
    """Check an agent's runtime config without building anything (no client, no process), so a
    bad config is refused when the agent is created rather than at its first turn."""
    kind = _kind_of(config)
    if kind in _ADAPTERS:
        parse_config(_config_model(kind), config)


def build_runtime(config: dict[str, Any]) -> Runtime | None:
    """A runtime for ``config`` (an agent's ``runtime`` dict), or None for ``none``/``remote``.

    Raises :class:`InvalidRequest` for a malformed config and :class:`ConfigError` when the
    environment does not allow it (no API key, model requests blocked).
    """
    kind = _kind_of(config)
    if kind in ("none", "remote"):
        return None
    return _builder(kind)(config)


def _kind_of(config: dict[str, Any]) -> str:
    if not isinstance(config, dict):
        raise InvalidRequest(
            f"a runtime config must be an object with a 'kind', not {config!r}",
            code="invalid_runtime_config",
        )
    kind = config.get("kind", "none")
    if kind not in RUNTIME_KINDS:
        raise InvalidRequest(
            f"runtime kind {kind!r} is unknown; use one of {', '.join(RUNTIME_KINDS)}",
            code="unknown_runtime",
        )
    return str(kind)


class MisconfiguredRuntime:
    """Stands in for a runtime whose config cannot be built: every turn fails with the reason,
    so the task ends as failed with the member named (C11) instead of the hub crashing."""

    kind = "misconfigured"

    def __init__(self, error: ParleyError) -> None:
        self.error = error

    async def respond(self, turn: Turn) -> TurnResult:
        failure = RuntimeFailure(
            f"agent {turn.agent.id!r} cannot take turns: {self.error.message}",
            reason="error",
            config_error=self.error.code,
        )
        scrub_failure(failure, secret_values(turn.agent.runtime))
        raise failure from self.error

    async def aclose(self) -> None:
        return None


class RuntimeRegistry:
    """One runtime object per agent, reused across turns (HTTP connection pools, a scripted
    runtime's position in its script) and rebuilt when the agent's config changes."""

    def __init__(self, build: Callable[[dict[str, Any]], Runtime | None] = build_runtime) -> None:
        self._build = build
        self._runtimes: dict[str, tuple[str, Runtime | None]] = {}
        # Replaced runtimes may still be serving a turn; they are closed with the registry.
        self._retired: list[Runtime] = []

    def get(self, agent_id: str, config: dict[str, Any]) -> Runtime | None:
        """The runtime for ``agent_id`` with ``config``, built on first use or config change.

        A config that cannot be built gives a :class:`MisconfiguredRuntime`, not cached, so a
        fix in the environment (an exported key) takes effect on the next turn."""
        fingerprint = json.dumps(config, sort_keys=True, default=str)
        cached = self._runtimes.get(agent_id)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        try:
            runtime = self._build(config)
        except ParleyError as exc:
            log.warning(
                "agent %r has an unusable runtime config: %s",
                agent_id,
                scrub(exc.message, secret_values(config)),
            )
            return MisconfiguredRuntime(exc)
        if cached is not None and cached[1] is not None:
            self._retired.append(cached[1])
        self._runtimes[agent_id] = (fingerprint, runtime)
        return runtime

    def validate(self, config: dict[str, Any]) -> None:
        """Refuse a config that could never be built (checked when an agent is created)."""
        validate_runtime_config(config)

    async def aclose(self) -> None:
        """Close every runtime this registry built."""
        runtimes = [r for _, r in self._runtimes.values() if r is not None] + self._retired
        self._runtimes.clear()
        self._retired.clear()
        for runtime in runtimes:
            try:
                await runtime.aclose()
            except Exception:
                log.exception("closing runtime %r failed", runtime.kind)
