"""In-process bus: each subscriber gets its own queue; publish never blocks the publisher."""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from typing import Any

from parley.core.ports import Tx

OVERFLOW = {"type": "overflow"}


class MemorySubscription:
    """Events for a set of topics. A subscriber that falls ``max_queue`` events behind gets one
    ``overflow`` event instead of the backlog and must re-read from the store."""

    def __init__(self, bus: MemoryBus, topics: Iterable[str], max_queue: int) -> None:
        self._bus = bus
        self.topics = frozenset(topics)
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._max = max_queue
        self._overflowed = False
        self.closed = False

    def _put(self, data: dict[str, Any]) -> None:
        if self._overflowed:
            return
        if self._queue.qsize() >= self._max:
            self._overflowed = True
            self._queue.put_nowait(OVERFLOW)
            return
        self._queue.put_nowait(data)

    def _put_overflow(self) -> None:
        """Make the subscriber re-read from the store (whatever it was told is stale)."""
        if not self._overflowed:
            self._overflowed = True
            self._queue.put_nowait(OVERFLOW)

    async def get(self) -> dict[str, Any]:
        item = await self._queue.get()
        if item is OVERFLOW:
            self._overflowed = False
        return item

    def get_nowait(self) -> dict[str, Any] | None:
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[dict[str, Any]]:
        while not self.closed:
            yield await self.get()

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._bus._remove(self)


class MemoryBus:
    """The default bus for a single hub process."""

    shared = False
    state = "local"

    def __init__(self, max_queue: int = 10_000) -> None:
        self._subs: dict[str, set[MemorySubscription]] = defaultdict(set)
        self._max_queue = max_queue

    async def publish(self, topic: str, data: dict[str, Any]) -> None:
        self.publish_nowait(topic, data)

    async def start(self) -> None:
        return None

    def publish_on_commit(self, tx: Tx, topic: str, data: dict[str, Any]) -> None:
        # One process: the commit order is the order of after-commit callbacks.
        tx.after_commit(functools.partial(self.publish_nowait, topic, data))

    def publish_nowait(self, topic: str, data: dict[str, Any]) -> None:
        for sub in tuple(self._subs.get(topic, ())):
            sub._put(data)

    def subscribe(self, topics: Iterable[str]) -> MemorySubscription:
        sub = MemorySubscription(self, topics, self._max_queue)
        for topic in sub.topics:
            self._subs[topic].add(sub)
        return sub

    def _remove(self, sub: MemorySubscription) -> None:
        for topic in sub.topics:
            subs = self._subs.get(topic)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[topic]

    def subscriber_count(self, topic: str) -> int:
        return len(self._subs.get(topic, ()))

    async def close(self) -> None:
        for subs in list(self._subs.values()):
            for sub in list(subs):
                await sub.close()
