"""Helpers of the meeting tests: scripted members whose replies depend on what they are asked
(a speech, a moderator decision, minutes), each labelled with its own model route."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.core.rooms import Room
from parley.core.runtime import Turn, TurnResult
from parley.service.hub import Hub
from parley.service.meetings.rooms import RoomSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent


def is_moderator(turn: Turn) -> bool:
    return turn.agent.id == "moderator"


def is_minutes(turn: Turn) -> bool:
    return turn.prompt.task.startswith("The meeting on")


def is_meeting(turn: Turn) -> bool:
    return turn.prompt.system.find("[Meeting]") >= 0 or is_moderator(turn) or is_minutes(turn)


@dataclass
class Member:
    """A scripted member: its speeches, its minutes, and the moderator decisions it makes when
    it convenes. Every turn it was asked is kept."""

    name: str
    model: str
    speeches: list[str] = field(default_factory=list)
    decisions: list[dict[str, str]] = field(default_factory=list)
    minutes: list[str] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    # Held while set: the work turn waits for ``work_gate``, a speech for ``speech_gate``; each
    # announces that it started through the matching ``*_started`` event.
    work_gate: asyncio.Event | None = None
    speech_gate: asyncio.Event | None = None
    work_started: asyncio.Event = field(default_factory=asyncio.Event)
    speech_started: asyncio.Event = field(default_factory=asyncio.Event)

    async def reply(self, turn: Turn) -> str:
        self.turns.append(turn)
        if "[Meeting]" in turn.prompt.system and not is_moderator(turn):
            self.speech_started.set()
            if self.speech_gate is not None:
                await self.speech_gate.wait()
        elif not is_moderator(turn) and not is_minutes(turn):
            self.work_started.set()
            if self.work_gate is not None:
                await self.work_gate.wait()
        if is_moderator(turn):
            return json.dumps(self.decisions.pop(0)) if self.decisions else "no idea"
        if is_minutes(turn):
            return self.minutes.pop(0) if self.minutes else f"{self.name}: my minutes"
        if "[Meeting]" in turn.prompt.system:
            return self.speeches.pop(0) if self.speeches else f"{self.name} has nothing to add"
        return f"{self.name} working"

    def speech_turns(self) -> list[Turn]:
        return [t for t in self.turns if "[Meeting]" in t.prompt.system]


class LabelledRuntime:
    """A scripted runtime whose replies name a model of their own, as different members'
    different models would."""

    kind = "scripted"

    def __init__(self, member: Member) -> None:
        self.member = member
        self.inner = ScriptedRuntime(member.reply)

    async def respond(self, turn: Turn) -> TurnResult:
        result = await self.inner.respond(turn)
        return TurnResult(text=result.text, model_route=f"scripted:{self.member.model}")

    async def aclose(self) -> None:
        return None


async def members(
    make_agent: MakeAgent, runtimes: StaticRuntimes, names: Sequence[str]
) -> dict[str, Member]:
    out = {}
    for name in names:
        await make_agent(name, runtime={"kind": "scripted"})
        out[name] = Member(name, model=f"model-{name}")
        runtimes.set(name, LabelledRuntime(out[name]))
    return out


async def room_with(hub: Hub, operator: Principal, names: Sequence[str], **config: object) -> Room:
    # "sync", then "sync-2", ...: a name names one room.
    taken = len(await hub.rooms.visible(operator, limit=1000))
    name = "sync" if taken == 0 else f"sync-{taken + 1}"
    room = await hub.rooms.create(
        operator, RoomSpec.model_validate({"name": name, "config": config})
    )
    for name in names:
        await hub.rooms.join(operator, room.id, name)
    return room


Check = Callable[[Turn], bool]
