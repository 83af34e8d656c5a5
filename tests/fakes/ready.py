"""A loopback listener that fake processes report to, so tests wait on events, not time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


class ReadyListener:
    """Collects lines that fake processes send to 127.0.0.1:``port``."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[str] = asyncio.Queue()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> ReadyListener:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        for writer in self._writers:
            writer.close()
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        with contextlib.suppress(ConnectionError):  # a killed process resets its connection
            while line := await reader.readline():
                await self.lines.put(line.decode().strip())
        # The process has gone: a later ``tell`` is for the ones still connected.
        self._writers.remove(writer)
        writer.close()

    async def tell(self, line: str) -> None:
        """Send ``line`` to every connected fake process (a barrier it waits on)."""
        for writer in self._writers:
            writer.write(line.encode() + b"\n")
            await writer.drain()

    async def next_line(self, *, unless: asyncio.Future[Any] | None = None) -> str:
        """The next reported line; fails if ``unless`` finishes first (the process is gone)."""
        getter = asyncio.ensure_future(self.lines.get())
        waiting: set[asyncio.Future[Any]] = {getter}
        if unless is not None:
            waiting.add(unless)
        done, _ = await asyncio.wait(waiting, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if getter not in done:
            getter.cancel()
            raise AssertionError(f"no report from the fake process; it ended with {unless!r}")
        return getter.result()
