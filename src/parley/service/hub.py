"""The hub: the service layer assembled over its ports, with its background work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from parley.core.clock import SystemClock
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import (
    Bus,
    Clock,
    ProcessKeeper,
    Runtime,
    RuntimeSource,
    Store,
    Workspace,
)
from parley.core.settings import HubSettings
from parley.service.chat_links import BridgeLinks
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.conversations.discussions import Discussions
from parley.service.conversations.invitations import Invitations
from parley.service.conversations.task_hooks import TaskHooks
from parley.service.conversations.tasks import TaskRunner
from parley.service.conversations.transcripts import Transcripts
from parley.service.conversations.turns import RemoteRuntime, Turns
from parley.service.events import EventLog
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail
from parley.service.mail.mailroom import Mailroom
from parley.service.meetings.meetings import Meetings
from parley.service.meetings.pulse import Pulse
from parley.service.meetings.rooms import Rooms
from parley.service.metrics import HubMetrics
from parley.service.search import Search
from parley.service.tools.toolbox import TurnToolBoxes
from parley.service.workers.processes import ProcessRecords
from parley.service.workers.workers import Workers

log = logging.getLogger("parley.hub")


class _NoRuntimes:
    def get(self, agent_id: str, config: dict[str, object]) -> Runtime | None:
        return None

    def validate(self, config: dict[str, object]) -> None:
        return None

    async def aclose(self) -> None:
        return None


class Hub:
    """Everything a surface needs: ``identity``, ``mail``, ``channels``, ``tasks``,
    ``discussions``, ``invitations``, ``turns``, ``rooms``, ``meetings``, ``workers`` — one
    instance per process."""

    def __init__(
        self,
        settings: HubSettings,
        *,
        store: Store,
        bus: Bus,
        workspace: Workspace,
        clock: Clock | None = None,
        runtimes: RuntimeSource | None = None,
        on_operator_rotated: Callable[[str], None] | None = None,
        processes: ProcessKeeper | None = None,
    ) -> None:
        clock = clock or SystemClock()
        self.settings = settings
        self.id = new_ulid()
        metrics = HubMetrics()
        self.ctx = ServiceContext(
            store=store,
            bus=bus,
            clock=clock,
            settings=settings,
            events=EventLog(clock, bus, self.id, on_recorded=metrics.event_recorded),
            workspace=workspace,
            metrics=metrics,
        )
        self.runtimes: RuntimeSource = runtimes or _NoRuntimes()
        # The processes the runtimes run on this machine: recorded while they live, and those
        # a dead hub left ended at start and by the lease sweep.
        self.processes = ProcessRecords(self.ctx, processes, self.id)
        self.bridge_links = BridgeLinks(self.ctx)
        self.identity = Identity(
            self.ctx,
            validate_runtime=self.runtimes.validate,
            rotation_ends=[self.bridge_links.end_all],
            on_operator_rotated=on_operator_rotated,
        )
        self.mail = Mail(self.ctx, self.identity)
        self.mailroom = Mailroom(self.ctx, self.identity)
        self.turns = Turns(self.ctx, self.mail)
        self._remote = RemoteRuntime(self.turns)
        # The tools of a turn act through this hub's services: they are looked up when a turn
        # asks for them, after this constructor has finished.
        toolboxes = TurnToolBoxes(self)
        self.tasks = TaskRunner(
            self.ctx,
            self.identity,
            Transcripts(self.ctx, self.identity),
            self.mail,
            hooks=TaskHooks(),
            runtime_for=self.runtime_for,
            toolbox_for=toolboxes.for_turn,
            hub_id=self.id,
        )
        self.channels = Channels(self.ctx, self.identity, self.tasks)
        # Each of these subscribes to the tasks' hooks as it is built; a task's end is heard in
        # this order (a discussion's reminder, a worker's turn, a meeting member's entry).
        self.discussions = Discussions(
            self.ctx, self.identity, self.channels, self.tasks, self.mail
        )
        self.invitations = Invitations(self.ctx, self.identity, self.channels, self.mail)
        self.workers = Workers(
            self.ctx, self.identity, self.channels, self.tasks, self.mail, self.id
        )
        self.rooms = Rooms(self.ctx, self.identity, self.channels, self.tasks.in_flight)
        self.meetings = Meetings(
            self.ctx,
            self.identity,
            self.channels,
            self.tasks,
            self.mail,
            self.rooms,
            self.runtime_for,
            self.runtimes.get,
            self.id,
        )
        self.pulse = Pulse(self.ctx, self.identity, self.mail, self.rooms, self.meetings)
        self.usage = self.ctx.usage
        self.search = Search(self.ctx)
        self._background: list[asyncio.Task[None]] = []
        self.operator_token: str | None = None
        self.started = False
        self.last_sweep = 0.0
        self._sweeping = False

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def bus(self) -> Bus:
        return self.ctx.bus

    def runtime_for(self, agent: Principal) -> Runtime | None:
        if not agent.takes_turns:
            return None  # disabled or archived: no turns until enabled
        kind = agent.runtime_kind
        if kind == "remote":
            return self._remote
        if kind == "none":
            return None
        return self.runtimes.get(agent.id, agent.runtime)

    async def start(self, *, background: bool = True) -> None:
        """Open the store (migrating it), create the operator on first start, close tasks a
        dead hub left running, start the sweeps."""
        await self.ctx.store.open()
        await self.ctx.store.mark_alive(self.id)
        self.processes.bind()
        await self.ctx.bus.start()
        if self.ctx.bus.shared:
            # Other hubs change principals and revoke tokens: forget what they changed.
            self._background.append(
                asyncio.create_task(self.identity.follow_changes(), name="parley-identity")
            )
        self.operator_token = await self.identity.bootstrap_operator()
        await self.tasks.recover()
        await self.meetings.recover()
        await self.workers.recover()
        await self.processes.end_orphans()
        self.last_sweep = self.ctx.clock.monotonic()
        if background:
            self._every(self.settings.expiry_sweep_s, self.mail.expire_due, "expiry")
            self._every(self.settings.expiry_sweep_s, self.bridge_links.sweep_expired, "links")
            self._every(self.settings.stale_sweep_s, self.discussions.remind_stale, "stale")
            if self.settings.worker_health_sweep_s > 0:
                self._every(self.settings.worker_health_sweep_s, self.workers.sweep_stale, "health")
            if self.settings.room_pulse_s > 0:
                self._every(self.settings.room_pulse_s, self.pulse.pulse_all, "pulse")
            if self.ctx.store.dialect == "postgresql":
                # Other hubs may share the store: hold the leases of this hub's discussions, and
                # take over those of hubs that died or stopped renewing (P2).
                self._every(self.settings.lease_s / 3, self.tasks.renew_leases, "lease")
                self._every(self.settings.lease_sweep_s, self.sweep_leases, "takeover")
                self._sweeping = True
        self.started = True

    async def sweep_leases(self) -> None:
        """Take over the discussions, meetings and worker turns other hubs can no longer drive:
        end them with a reason (as a restart does; a restart also flags orphaned workers)."""
        await self.tasks.recover()
        await self.meetings.recover()
        await self.workers.recover(at_start=False)
        await self.processes.end_orphans()
        self.last_sweep = self.ctx.clock.monotonic()

    def sweep_health(self) -> str:
        """``off`` (one hub: SQLite), ``ok``, or ``late`` when the lease sweep has not run for
        two of its intervals (it keeps failing: dead hubs' discussions are not taken over)."""
        if not (self.started and self._sweeping):
            return "off"
        since = self.ctx.clock.monotonic() - self.last_sweep
        return "ok" if since <= 2 * self.settings.lease_sweep_s + 1 else "late"

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
        self._sweeping = False
        await self.meetings.stop_all()
        await self.tasks.stop()
        await self.runtimes.aclose()
        self.processes.unbind()
        await self.ctx.bus.close()
        await self.ctx.store.close()
        self.started = False
