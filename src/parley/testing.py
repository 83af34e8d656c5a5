"""In-package test helpers for parley and for users' own tests: a controllable clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from parley.core.ports import Runtime, RuntimeSource


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds


class StaticRuntimes:
    """A RuntimeSource for tests: runtimes registered per agent id, with an optional fallback
    (e.g. the real registry) for agents that have none registered."""

    def __init__(self, fallback: RuntimeSource | None = None) -> None:
        self.by_agent: dict[str, Runtime] = {}
        self.fallback = fallback

    def set(self, agent_id: str, runtime: Runtime) -> None:
        self.by_agent[agent_id] = runtime

    def get(self, agent_id: str, config: dict[str, Any]) -> Runtime | None:
        found = self.by_agent.get(agent_id)
        if found is None and self.fallback is not None:
            return self.fallback.get(agent_id, config)
        return found

    def validate(self, config: dict[str, Any]) -> None:
        if self.fallback is not None:
            self.fallback.validate(config)

    async def aclose(self) -> None:
        for runtime in self.by_agent.values():
            await runtime.aclose()
        if self.fallback is not None:
            await self.fallback.aclose()
