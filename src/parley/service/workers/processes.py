"""The record of the processes this hub's runtimes run, and ending those dead hubs left.

A command-line agent runs under a supervisor that ends every process below it when the hub
dies; the record (``runtime_processes``: pid, start time, process group, hub, machine) is the
second line, for a supervisor that was itself killed. A hub that starts, and the lease sweep of
a cluster, hand the records of dead hubs on this machine to the process keeper, which ends what
is left of them (and every process whose environment names a dead hub as its owner); the
records are deleted and the event ``runtime.orphans_ended`` names the hub and the pids.
Records of another machine are left to a hub on that machine. Records of this machine made
before it last started (a machine is its name and its boot) name processes that died with that
boot: those of hubs that are gone are deleted, with the same event and no pid.
"""

from __future__ import annotations

import logging

from parley.core.ports import ProcessKeeper, Tx
from parley.core.processes import RuntimeProcess
from parley.service.context import ServiceContext

log = logging.getLogger("parley.service.workers")

ORPHANS_ENDED = "runtime.orphans_ended"


class ProcessRecords:
    """The :class:`~parley.core.ports.ProcessLedger` of one hub, over its store."""

    def __init__(self, ctx: ServiceContext, keeper: ProcessKeeper | None, hub_id: str) -> None:
        self.ctx = ctx
        self.keeper = keeper
        self.hub_id = hub_id

    def bind(self) -> None:
        """Processes started from now on are this hub's, recorded here."""
        if self.keeper is not None:
            self.keeper.bind(self.hub_id, self)

    def unbind(self) -> None:
        if self.keeper is not None:
            self.keeper.unbind(self.hub_id)

    async def started(self, process: RuntimeProcess) -> None:
        async def job(tx: Tx) -> None:
            tx.insert("runtime_processes", process)

        await self.ctx.store.write(job)

    async def ended(self, process_id: str) -> None:
        async def job(tx: Tx) -> None:
            await tx.delete("runtime_processes", process_id)

        await self.ctx.store.write(job)

    async def end_orphans(self) -> list[int]:
        """End what dead hubs' records name on this machine; return the pids ended."""
        keeper = self.keeper
        if keeper is None:
            return []
        async with self.ctx.store.read() as rtx:
            p = rtx.table("runtime_processes").c
            rows: list[RuntimeProcess] = await rtx.select(
                "runtime_processes", p.hub_id != self.hub_id
            )
        by_hub: dict[str, list[RuntimeProcess]] = {}
        before_boot: dict[str, list[RuntimeProcess]] = {}
        for row in rows:
            if row.host == keeper.host:
                by_hub.setdefault(row.hub_id, []).append(row)
            elif _earlier_boot(row.host, keeper.host):
                before_boot.setdefault(row.hub_id, []).append(row)
        ended: list[int] = []
        for hub_id, records in sorted(by_hub.items()):
            if await self.ctx.store.is_alive(hub_id):
                continue
            pids = await keeper.end_orphans(records, [hub_id])
            ended += pids
            await self._forget(hub_id, records, pids)
        for hub_id, records in sorted(before_boot.items()):
            # Their processes ended with the boot they ran in: only the records are left.
            if not await self.ctx.store.is_alive(hub_id):
                await self._forget(hub_id, records, [])
        return ended

    async def _forget(self, hub_id: str, records: list[RuntimeProcess], pids: list[int]) -> None:
        async def job(tx: Tx) -> None:
            for record in records:
                await tx.delete("runtime_processes", record.id)
            self.ctx.events.record(
                tx,
                ORPHANS_ENDED,
                actor="system",
                subject=f"hub:{hub_id}",
                payload={
                    "hub_id": hub_id,
                    "records": len(records),
                    "ended_pids": pids,
                    "commands": sorted({r.command for r in records}),
                },
            )

        await self.ctx.store.write(job)
        if pids:
            log.warning(
                "ended %d process(es) left by hub %s, which is gone: %s", len(pids), hub_id, pids
            )


def _earlier_boot(host: str, this: str) -> bool:
    """Whether ``host`` is this machine (``<name>/<boot>``) as it ran in another boot."""
    name, _, boot = this.partition("/")
    other, _, other_boot = host.partition("/")
    return bool(boot and other_boot) and other == name and other_boot != boot
