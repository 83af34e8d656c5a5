"""What the fake model servers share: a script of replies, the requests they received, and a
hang that lasts until the test ends."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from tests.fakes.serving import LocalServer


@dataclass
class FakeReply:
    """One scripted answer: text and stop reason, or an HTTP error status, or a hang."""

    text: str = "Looks good to me."
    stop: str | None = None  # the protocol's own completed stop reason when None
    status: int = 200
    error_message: str = "scripted failure"
    hang: bool = False
    headers: dict[str, str] = field(default_factory=dict)


class FakeModelServer:
    """Base of the fake servers: ``script(...)`` the next replies, read ``requests`` after."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.default = FakeReply()
        self._replies: deque[FakeReply] = deque()
        self.received = asyncio.Event()
        """Set when a request arrives: the call is in flight."""
        self.release = asyncio.Event()
        """Hanging requests wait on this; set at teardown."""
        self._server = LocalServer(self.app())

    def app(self) -> Any:
        raise NotImplementedError

    def script(self, *replies: FakeReply) -> None:
        self._replies.extend(replies)

    async def take(self, request: Request) -> FakeReply:
        """Record the request and pick its reply; wait here if the reply hangs."""
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        reply = self._replies.popleft() if self._replies else self.default
        self.received.set()
        if reply.hang:
            await self.release.wait()
        return reply

    async def __aenter__(self) -> FakeModelServer:
        await self._server.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        await self._server.__aexit__(*exc)

    @property
    def url(self) -> str:
        return self._server.url
