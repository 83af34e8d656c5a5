"""The hub: the service layer assembled over its ports, with its background work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from parley.config import Settings
from parley.core.clock import SystemClock
from parley.core.ports import Bus, Clock, Store, Workspace
from parley.service.context import ServiceContext
from parley.service.events import EventLog
from parley.service.identity import Identity
from parley.service.mail import Mail

log = logging.getLogger("parley.hub")


class Hub:
    """Everything a surface needs: ``identity``, ``mail``, ``events`` and the store."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        bus: Bus,
        workspace: Workspace,
        clock: Clock | None = None,
    ) -> None:
        clock = clock or SystemClock()
        self.settings = settings
        self.ctx = ServiceContext(
            store=store,
            bus=bus,
            clock=clock,
            settings=settings,
            events=EventLog(clock, bus),
            workspace=workspace,
        )
        self.identity = Identity(self.ctx)
        self.mail = Mail(self.ctx, self.identity)
        self._background: list[asyncio.Task[None]] = []
        self.operator_token: str | None = None
        self.started = False

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def bus(self) -> Bus:
        return self.ctx.bus

    async def start(self, *, background: bool = True) -> None:
        """Open the store (migrating it), create the operator on first start, start sweeps."""
        await self.ctx.store.open()
        self.operator_token = await self.identity.bootstrap_operator()
        if background:
            self._every(self.settings.expiry_sweep_s, self.mail.expire_due, "expiry")
        self.started = True

    def _every(self, seconds: float, fn: Callable[[], Awaitable[object]], name: str) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    await fn()
                except Exception:
                    log.exception("background %s sweep failed", name)

        self._background.append(asyncio.create_task(loop(), name=f"parley-{name}"))

    async def stop(self) -> None:
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._background.clear()
        await self.ctx.bus.close()
        await self.ctx.store.close()
        self.started = False
