"""Run an ASGI app on 127.0.0.1 with uvicorn inside the test's event loop."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn


class LocalServer:
    """An ASGI app served on a free loopback port for the length of an ``async with``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LocalServer:
        # Bind and listen before serving: a client may connect at once, the backlog holds it.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", access_log=False, http="h11"
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await self._task

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
