"""The hub: the service layer assembled over its ports, with its background work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from parley.config import Settings, write_operator_token
from parley.core import discussion as d
from parley.core.channels import ChannelMessage, Task
from parley.core.clock import SystemClock
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Bus, Clock, Runtime, RuntimeSource, Store, Tx, Workspace
from parley.service.chat_links import BridgeLinks
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.conversations.discussions import Discussions
from parley.service.conversations.invitations import Invitations
from parley.service.conversations.tasks import TaskRunner
from parley.service.conversations.turns import RemoteRuntime, Turns
from parley.service.events import EventLog
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail
from parley.service.mail.mailroom import Mailroom
from parley.service.meetings.meetings import Meetings
from parley.service.meetings.pulse import Pulse
from parley.service.meetings.rooms import Rooms
from parley.service.tools.toolbox import TurnToolBoxes
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
        settings: Settings,
        *,
        store: Store,
        bus: Bus,
        workspace: Workspace,
        clock: Clock | None = None,
        runtimes: RuntimeSource | None = None,
    ) -> None:
        clock = clock or SystemClock()
        self.settings = settings
        self.id = new_ulid()
        self.ctx = ServiceContext(
            store=store,
            bus=bus,
            clock=clock,
            settings=settings,
            events=EventLog(clock, bus, self.id),
            workspace=workspace,
        )
        self.runtimes: RuntimeSource = runtimes or _NoRuntimes()
        self.bridge_links = BridgeLinks(self.ctx)
        self.identity = Identity(
            self.ctx,
            validate_runtime=self.runtimes.validate,
            rotation_ends=[self.bridge_links.end_all],
        )
        self.identity.on_operator_rotated = self._store_operator_token
        self.mail = Mail(self.ctx, self.identity)
        self.mailroom = Mailroom(self.ctx, self.identity)
        self.channels = Channels(self.ctx, self.identity)
        self.turns = Turns(self.ctx, self.mail)
        self._remote = RemoteRuntime(self.turns)
        self.tasks = TaskRunner(self.ctx, self.identity, self.channels, self.runtime_for, self.id)
        self.channels.runner = self.tasks
        self.tasks.notify_idle_agent = self._notify_idle_agent
        self.tasks.toolbox_for = TurnToolBoxes(self).for_turn
        self.tasks.on_finished.append(self._remind_initiator)
        self.discussions = Discussions(
            self.ctx, self.identity, self.channels, self.tasks, self.mail
        )
        self.invitations = Invitations(self.ctx, self.identity, self.channels, self.mail)
        self.rooms = Rooms(self.ctx, self.identity, self.channels, self._in_flight)
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
        self.workers = Workers(
            self.ctx, self.identity, self.channels, self.tasks, self.mail, self.id
        )
        # A member awaiting entry enters at its turn's end (its work-unit boundary, R2).
        self.tasks.on_finished.append(self.meetings.on_task_finished)
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
        kind = agent.runtime_kind
        if kind == "remote":
            return self._remote
        if kind == "none":
            return None
        return self.runtimes.get(agent.id, agent.runtime)

    def _in_flight(self, agent_id: str) -> bool:
        """Whether this hub has a turn of the agent in flight (a remote agent's pending turn is
        driven by a task too): what "working" means for a room member."""
        return any(agent_id in live.task.members for live in self.tasks.live.values())

    def _store_operator_token(self, token: str) -> None:
        """Rewrite the operator token file after a rotation: the CLI on this machine reads it,
        and the token it held no longer works."""
        try:
            path = write_operator_token(self.settings.data_root(), token)
        except OSError as exc:
            # The rotation has committed and its response carries the new token: refusing now
            # would lose it. Say where the CLI's token must go instead.
            log.error(
                "the operator token was rotated but %s could not be rewritten (%s); store the "
                "new token there by hand or pass it with --token/PARLEY_TOKEN",
                exc.filename,
                exc.strerror,
            )
            return
        log.warning("the operator token was rotated; %s now holds the new one", path)

    async def _notify_idle_agent(self, tx: Tx, agent: Principal, message: ChannelMessage) -> None:
        """An agent without a runtime is not woken by a turn; it finds the work-channel message
        in its inbox (and any live wait_for_mail wakes)."""
        await self.mail.deliver_system(
            tx,
            agent.id,
            "notice",
            f"New message in your work channel from {message.sender_id}",
            message.content,
            {"channel_id": message.channel_id, "message_id": message.id},
        )

    async def _remind_initiator(self, task: Task) -> None:
        """When a discussion's rounds end and it is still open, the initiator also finds the
        moderator's reminder in its inbox: an agent connected over MCP is waiting on
        wait_for_mail, not reading the channel, and must learn that it should now finish."""
        reminder = d.reminder_after(task.end_reason or "", task.rounds)
        if task.mode != "discussion" or reminder is None:
            return

        async def job(tx: Tx) -> None:
            channel = await tx.get_channel(task.channel_id)
            if channel is None or channel.status != "active":
                return
            await self.discussions.tell_initiator(
                tx,
                channel,
                f"Discussion {channel.name!r}: rounds ended ({task.end_reason}); write the "
                "summary and call discuss_callback",
                reminder,
                end_reason=task.end_reason,
            )

        await self.ctx.store.write(job)

    async def start(self, *, background: bool = True) -> None:
        """Open the store (migrating it), create the operator on first start, close tasks a
        dead hub left running, start the sweeps."""
        await self.ctx.store.open()
        await self.ctx.store.mark_alive(self.id)
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
        self.last_sweep = self.ctx.clock.monotonic()
        if background:
            self._every(self.settings.expiry_sweep_s, self.mail.expire_due, "expiry")
            self._every(self.settings.expiry_sweep_s, self.bridge_links.sweep_expired, "links")
            self._every(self.settings.stale_sweep_s, self.discussions.remind_stale, "stale")
            if self.settings.worker_health_sweep_s > 0:
                self._every(self.settings.worker_health_sweep_s, self.workers.sweep_stale, "health")
            if self.settings.room_pulse_s > 0:
                self._every(self.settings.room_pulse_s, self.pulse.pulse_all, "pulse")
            if self.settings.is_postgres:
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
        await self.ctx.bus.close()
        await self.ctx.store.close()
        self.started = False
