"""Helpers of the web UI's live-stream tests over plain HTTP: a signed-in browser session (an
httpx client with its cookie jar) against a served hub, the events of its live streams, and a
stand-in for the panels' wait between two renders."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from parley.surfaces.web.feeds import LiveStreams

# Hang guards only: every wait below ends on an event long before these.
READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LiveEvent:
    event: str
    data: str
    id: str | None = None


class LiveReader:
    """The events of one open live stream, one at a time, until the hub ends it."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self) -> LiveEvent | None:
        fields: dict[str, str] = {}
        data: list[str] = []
        async with asyncio.timeout(READ_TIMEOUT_S):
            async for line in self._lines:
                if line == "":
                    if fields or data:
                        return LiveEvent(
                            fields.get("event", "message"), "\n".join(data), fields.get("id")
                        )
                elif not line.startswith(":"):
                    key, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if key == "data":
                        data.append(value)
                    else:
                        fields[key] = value
        return None

    async def until(self, event: str, contains: str = "") -> LiveEvent:
        """The next event named ``event`` whose data holds ``contains``."""
        while (found := await self.next()) is not None:
            if found.event == event and contains in found.data:
                return found
        raise AssertionError(f"the stream ended before an {event!r} event with {contains!r}")

    async def until_all(self, *wanted: tuple[str, str]) -> None:
        """Read until an event of each (name, text it holds) of ``wanted`` has come, in any
        order."""
        missing = list(wanted)
        while missing:
            found = await self.next()
            assert found is not None, f"the stream ended before {missing}"
            missing = [
                (e, text) for e, text in missing if not (found.event == e and text in found.data)
            ]

    async def to_end(self) -> list[LiveEvent]:
        events = []
        while (found := await self.next()) is not None:
            events.append(found)
        return events


class Browser:
    """One browser's session of the UI: its cookie, its CSRF token and its live streams."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.AsyncClient(base_url=url, timeout=READ_TIMEOUT_S)
        self.csrf = ""

    async def __aenter__(self) -> Browser:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def sign_in(self, token: str) -> httpx.Response:
        """Sign in (the answer is returned whatever it is); once signed in, the CSRF token of
        the overview page is kept for the forms."""
        r = await self.client.post("/ui/signin", data={"token": token}, headers=self.origin)
        if r.status_code == 303:
            page = await self.client.get("/ui/")
            found = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert found is not None, page.text
            self.csrf = found.group(1)
        return r

    @property
    def origin(self) -> dict[str, str]:
        return {"Origin": self.url}

    async def sign_out(self) -> None:
        r = await self.client.post("/ui/signout", data={"csrf": self.csrf}, headers=self.origin)
        assert r.status_code == 303, r.text

    @asynccontextmanager
    async def live(self, path: str) -> AsyncIterator[LiveReader]:
        """An open live stream (answered 200); closed when the block ends."""
        async with self.client.stream(
            "GET", path, headers={"Accept": "text/event-stream"}
        ) as response:
            assert response.status_code == 200, (await response.aread()).decode()
            yield LiveReader(response)

    async def refused(self, path: str) -> httpx.Response:
        """Open a live stream that the hub refuses; returns the refusal."""
        async with self.client.stream(
            "GET", path, headers={"Accept": "text/event-stream"}
        ) as response:
            # An accepted stream would never end: only a refusal is read.
            assert response.status_code != 200, f"the hub opened {path}"
            await response.aread()
        return response


class Pacer:
    """Stands in for a panel's wait between two renders (``LiveStreams.pace``): it passes at
    once, or, held, waits until released. Counts the waits."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.waiting = asyncio.Event()
        self._open = asyncio.Event()
        self._open.set()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.waiting.set()
        await self._open.wait()

    def hold(self) -> None:
        self._open.clear()
        self.waiting.clear()

    def release(self) -> None:
        self._open.set()


def open_streams(live: LiveStreams, principal_id: str) -> int:
    return live.open_count(principal_id)
