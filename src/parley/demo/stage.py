"""What the parts of ``parley demo`` share: the driver a scene plays on (``Stage``, which
``story.Demo`` implements), each agent's scripted model route, and the held turns and bounded
waits that make the story play the same way every time.

The scenes (``meeting``, ``workers``) import only this module, never ``story`` nor each other;
``story`` imports the scenes and runs them in order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx

    from parley.config import Settings

# Each member's own scripted runtime, named by its model route.
VOICES = {agent: f"scripted:{agent}-script" for agent in ("planner", "reviewer", "tester")}

# How long the scene waits for a step of the hub before it gives up with an error.
STEP_TIMEOUT_S = 120.0


class Stage(Protocol):
    """The demo's driver as a scene uses it: the hub's URL, the operator's and each agent's HTTP
    client, each agent's work channel, and a numbered step heading."""

    url: str
    settings: Settings
    op: httpx.AsyncClient
    clients: dict[str, httpx.AsyncClient]
    work: dict[str, str]

    async def call(self, client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
        """The JSON answer of one request, or RuntimeError on an HTTP error status."""
        ...

    def step(self, title: str) -> None:
        """Print the heading of the next step of the story."""
        ...


async def reached(event: asyncio.Event, what: str) -> None:
    """Wait for a step of the scene; a hub that never gets there fails the demo, not hangs it."""
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await event.wait()
    except TimeoutError:
        raise RuntimeError(f"the meeting scene did not reach {what!r}") from None


@dataclass
class Hold:
    """A scripted turn the demo keeps open: ``started`` is set when the turn begins, and the
    turn answers once ``release`` is set."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self) -> None:
        self.started.set()
        await self.release.wait()
