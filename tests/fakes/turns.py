"""Build turns for runtime tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from parley.core.runtime import AgentProfile, Prompt, TranscriptEntry, Turn, TurnInput

PROMPT = Prompt(
    system="You are alice, a careful reviewer.",
    task="Review the plan for the migration.",
    transcript=(TranscriptEntry(id="m1", speaker="bob", role="agent", content="Ship it."),),
    instructions="Round 1 of 2. Reply briefly or say NO_REPLY.",
)


def make_turn(
    agent_id: str = "alice",
    *,
    prompt: Prompt = PROMPT,
    timeout_s: float = 30.0,
    cancel: asyncio.Event | None = None,
    round: int | None = 1,
    runtime: dict[str, Any] | None = None,
    runtime_state: dict[str, Any] | None = None,
    workspace: str | None = None,
    state_sink: Callable[[dict[str, Any]], None] | None = None,
    live_input: TurnInput | None = None,
) -> Turn:
    return Turn(
        invocation_id=f"inv-{agent_id}-{round}",
        agent=AgentProfile(
            id=agent_id,
            display_name=agent_id.title(),
            workspace=workspace,
            persona="",
            runtime=runtime or {},
        ),
        channel_id="ch-1",
        session_id=f"s-{agent_id}",
        prompt=prompt,
        timeout_s=timeout_s,
        cancel=cancel or asyncio.Event(),
        round=round,
        runtime_state=runtime_state or {},
        state_sink=state_sink,
        live_input=live_input,
    )


class Reports:
    """The runtime states a turn reports through ``Turn.report_state``, in order; pass
    ``reports.sink`` as the turn's ``state_sink``."""

    def __init__(self) -> None:
        self.states: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def sink(self, state: dict[str, Any]) -> None:
        self.states.put_nowait(state)

    async def next(self, call: asyncio.Future[Any]) -> dict[str, Any]:
        """The next state reported; fails if the turn ``call`` ends first."""
        getter = asyncio.ensure_future(self.states.get())
        await asyncio.wait({getter, call}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            raise AssertionError(f"the turn ended without reporting its state: {call!r}")
        return getter.result()

    def rest(self) -> list[dict[str, Any]]:
        """What else was reported, not waited for."""
        rest = []
        while not self.states.empty():
            rest.append(self.states.get_nowait())
        return rest
