"""The ``scripted`` runtime: deterministic replies for tests, demos and benchmarks.

Its model route is always ``scripted`` so a scripted reply is labelled as such wherever it
shows. It obeys the same deadline, cancel and empty-reply rules as a real model.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.adapters.runtimes.endpoint import parse_config
from parley.adapters.runtimes.race import ProviderReply, race_turn
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Turn, TurnResult

ROUTE = "scripted"


class ScriptedFailure(BaseModel):
    """A script step that fails the turn: ``{"fail": "error"}`` or ``{"fail": "stop_reason"}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fail: Literal["error", "stop_reason"]
    message: str = "scripted failure"


class ScriptedHang(BaseModel):
    """A script step that never answers (``{"hang": true}``), so the deadline or the cancel
    signal decides the turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hang: Literal[True]


Step = str | ScriptedFailure | ScriptedHang
ReplyFunction = Callable[[Turn], str | Awaitable[str]]


class ScriptedConfig(BaseModel):
    """``{"kind": "scripted", "replies": [...], "cycle": false, "replies_by_round": {"1": ...},
    "timeout_s": ...}`` for agents created over REST."""

    model_config = ConfigDict(extra="forbid")

    replies: list[Step] = Field(default_factory=list)
    cycle: bool = False
    replies_by_round: dict[int, Step] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0)


class ScriptedRuntime:
    """Replies from a script: a list used by every agent (each agent with its own cursor), a
    mapping of agent id to list, or a function of the turn.

    A list runs out after its last step unless ``cycle`` is set; running out is a failure, not
    silence. ``replies_by_round`` overrides the list for the rounds it names.
    """

    kind = "scripted"
    model_route = ROUTE

    def __init__(
        self,
        script: Sequence[Step] | Mapping[str, Sequence[Step]] | ReplyFunction,
        *,
        cycle: bool = False,
        replies_by_round: Mapping[int, Step] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self._function: ReplyFunction | None = None
        self._scripts: Mapping[str, Sequence[Step]] | None = None
        self._shared: Sequence[Step] = ()
        if callable(script):
            self._function = script
        elif isinstance(script, Mapping):
            self._scripts = {agent: list(steps) for agent, steps in script.items()}
        else:
            self._shared = list(script)
        self.cycle = cycle
        self.replies_by_round = dict(replies_by_round or {})
        self.timeout_s = timeout_s
        self._cursor: dict[str, int] = {}
        self.turns: list[Turn] = []
        """Every turn this runtime was asked, in order, so tests can read the prompts."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ScriptedRuntime:
        parsed = parse_config(ScriptedConfig, config)
        return cls(
            parsed.replies,
            cycle=parsed.cycle,
            replies_by_round=parsed.replies_by_round,
            timeout_s=parsed.timeout_s,
        )

    async def respond(self, turn: Turn) -> TurnResult:
        self.turns.append(turn)
        # Pick the step now, not inside the race, so a cancelled turn still consumes its step
        # and the script stays deterministic whatever the timing.
        step = self._function or self._next_step(turn)
        return await race_turn(
            turn, lambda: _play(step, turn), route=ROUTE, timeout_s=self.timeout_s
        )

    def _next_step(self, turn: Turn) -> Step | RuntimeFailure:
        if turn.round is not None and turn.round in self.replies_by_round:
            return self.replies_by_round[turn.round]
        agent = turn.agent.id
        if self._scripts is not None:
            if agent not in self._scripts:
                return RuntimeFailure(
                    f"the scripted runtime has no script for agent {agent!r}; "
                    f"it has scripts for {sorted(self._scripts)}",
                    reason="error",
                    model_route=ROUTE,
                )
            steps = self._scripts[agent]
        else:
            steps = self._shared
        index = self._cursor.get(agent, 0)
        self._cursor[agent] = index + 1
        if self.cycle and steps:
            return steps[index % len(steps)]
        if index >= len(steps):
            return RuntimeFailure(
                f"the scripted runtime ran out of replies for agent {agent!r} after "
                f"{len(steps)} turn(s); add replies or set cycle",
                reason="error",
            )
        return steps[index]

    async def aclose(self) -> None:
        return None


async def _play(step: Step | RuntimeFailure | ReplyFunction, turn: Turn) -> ProviderReply:
    if isinstance(step, str):
        return ProviderReply(text=step)
    if isinstance(step, RuntimeFailure):
        raise step
    if isinstance(step, ScriptedFailure):
        stop_reason = "scripted" if step.fail == "stop_reason" else None
        raise RuntimeFailure(step.message, reason=step.fail, stop_reason=stop_reason)
    if isinstance(step, ScriptedHang):
        await asyncio.Event().wait()  # never set: only the deadline or the cancel ends it
        raise AssertionError("unreachable")
    reply = step(turn)
    if inspect.isawaitable(reply):
        reply = await reply
    return ProviderReply(text=reply)
