"""What the fake model servers share: a script of replies (text, or tool calls the model makes),
the requests they received, and a hang that lasts until the test ends."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from tests.fakes.serving import LocalServer


@dataclass(frozen=True)
class FakeCall:
    """A tool call a scripted model makes: the tool's name and its arguments, and for the
    Responses API the namespace of a tool offered inside one (Codex offers an MCP server's
    tools in a namespace ``mcp__<server>``)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    namespace: str | None = None


@dataclass
class FakeReply:
    """One scripted answer: text and stop reason, tool calls, an HTTP error status, or a hang."""

    text: str = "Looks good to me."
    calls: list[FakeCall] = field(default_factory=list)
    """Tool calls the model asks for (the protocol's tool-use stop reason); ``text`` goes with
    them as the model's words before the calls, if not empty."""
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
        self.responder: Callable[[dict[str, Any]], FakeReply] | None = None
        """Answers a request (its JSON body) when nothing is scripted: for conversations whose
        order a test cannot script, such as several agents' turns."""
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
        body = self.requests[-1]
        if self._replies:
            reply = self._replies.popleft()
        elif self.responder is not None:
            reply = self.responder(body)
        else:
            reply = self.default
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
