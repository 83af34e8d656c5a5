"""Who owns the processes runtimes run on this machine, and ending those a dead hub left.

Every command-line agent runs under a supervisor (:mod:`.supervise`) that ends everything below
it when the agent exits, is stopped, or the hub dies. The :class:`ProcessOwner` of this Python
process (one hub per process) adds the second line: each supervised process is recorded in the
hub's store while it lives (:class:`~parley.core.processes.RuntimeProcess`), and carries the
hub's id in its environment (:data:`~parley.core.processes.OWNER_ENV`), inherited by every
process below it. A hub that starts, or takes over a dead hub's work, hands the dead hubs'
records of this machine to :meth:`ProcessOwner.end_orphans`, which ends the recorded process
trees (when the pid still has the recorded start time) and every process whose environment
names a dead hub, even one whose supervisor was killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING

from parley.core.ids import new_ulid
from parley.core.ports import ProcessLedger
from parley.core.processes import OWNER_ENV, RuntimeProcess

if TYPE_CHECKING:
    import psutil

log = logging.getLogger(__name__)

_START_TIME_SLACK_S = 0.05
_GONE_WAIT_S = 5.0


@cache
def this_host() -> str:
    """This machine as it runs now: its name and its boot (pids mean nothing after a reboot)."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()[:8]
    return f"{socket.gethostname()}/{boot}" if boot else socket.gethostname()


class ProcessOwner:
    """The hub that owns the processes started in this Python process, and their records."""

    def __init__(self) -> None:
        self.host = this_host()
        self.hub_id: str | None = None
        self._ledger: ProcessLedger | None = None
        self.live: dict[str, RuntimeProcess] = {}
        self._writes: dict[str, asyncio.Future[None]] = {}

    def bind(self, hub_id: str, ledger: ProcessLedger) -> None:
        if self.hub_id is not None and self.hub_id != hub_id:
            log.warning(
                "hub %s starts while hub %s runs in this process: the processes runtimes start "
                "from now on are recorded as the new hub's",
                hub_id,
                self.hub_id,
            )
        self.hub_id = hub_id
        self._ledger = ledger

    def unbind(self, hub_id: str) -> None:
        if self.hub_id == hub_id:
            self.hub_id = None
            self._ledger = None

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` marked with the owning hub, so that every process below can be found."""
        if self.hub_id is None:
            return env
        return {**env, OWNER_ENV: self.hub_id}

    def started(self, pid: int, agent_pid: int, command: str) -> RuntimeProcess | None:
        """Record the supervisor ``pid`` (of ``agent_pid``) for the hub; None without a hub.
        The record is written in the background: the turn does not wait for it, and a turn
        cancelled meanwhile cannot leave the process unowned."""
        if self.hub_id is None:
            return None
        record = RuntimeProcess(
            id=new_ulid(),
            hub_id=self.hub_id,
            host=self.host,
            pid=pid,
            pgid=pid,
            start_time=_start_time(pid) or 0.0,
            agent_pid=agent_pid,
            command=os.path.basename(command)[:200],
            created=datetime.now(UTC),
        )
        self.live[record.id] = record
        if self._ledger is not None:
            self._writes[record.id] = asyncio.ensure_future(self._write(self._ledger, record))
        return record

    async def _write(self, ledger: ProcessLedger, record: RuntimeProcess) -> None:
        try:
            await ledger.started(record)
        except Exception:
            # The supervisor still ends the tree if the hub dies; only the second line is
            # missing for this process.
            log.exception("recording process %d failed", record.pid)

    async def ended(self, record: RuntimeProcess | None) -> None:
        """Forget ``record``: its process and everything below it have ended."""
        if record is None or self.live.pop(record.id, None) is None:
            return
        write = self._writes.pop(record.id, None)
        if write is not None:
            await asyncio.wait({write})  # deleted after it was written, never before
        ledger = self._ledger
        if ledger is not None and record.hub_id == self.hub_id:
            try:
                await ledger.ended(record.id)
            except Exception:
                log.exception("forgetting process %d failed", record.pid)

    async def end_orphans(
        self, records: Sequence[RuntimeProcess], dead_hubs: Iterable[str]
    ) -> list[int]:
        mine = [r for r in records if r.host == self.host]
        dead = set(dead_hubs) - {self.hub_id}
        if not mine and not dead:
            return []
        return await asyncio.to_thread(_end_orphans, mine, dead)


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _end_orphans(records: Sequence[RuntimeProcess], dead_hubs: set[str]) -> list[int]:
    import psutil

    doomed: dict[int, psutil.Process] = {}
    for record in records:
        try:
            root = psutil.Process(record.pid)
            if abs(root.create_time() - record.start_time) > _START_TIME_SLACK_S:
                continue  # the pid belongs to another process now
            for proc in [root, *root.children(recursive=True)]:
                doomed[proc.pid] = proc
        except psutil.Error:
            continue
    if dead_hubs:
        me = os.getpid()
        for proc in psutil.process_iter():
            if proc.pid == me or proc.pid in doomed:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(OWNER_ENV) in dead_hubs:
                    doomed[proc.pid] = proc
    # A zombie has ended already; only its new parent's reaping is left.
    doomed = {pid: proc for pid, proc in doomed.items() if _running(proc)}
    for proc in doomed.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + _GONE_WAIT_S
    while (alive := [p for p in doomed.values() if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)  # a worker thread polling other processes' ends, with a bound
    if alive:
        log.error("processes of a dead hub did not end: %s", sorted(p.pid for p in alive))
    return sorted(doomed)


def _running(proc: psutil.Process) -> bool:
    import psutil

    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


OWNER = ProcessOwner()
"""This process's owner (a process runs one hub)."""


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (the fallback when its supervisor did not
    finish its own stop in time)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
