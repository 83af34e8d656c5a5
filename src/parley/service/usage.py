"""Token and cost accounting (``core/usage.py``): each turn's usage recorded with the turn, the
totals people ask for, and budgets checked before a turn runs.

A record is written in the transaction that records its turn (the invocation of a discussion's
turn, the speech of a meeting's), and counted in ``/metrics`` once that commits: a rolled-back
turn costs nothing in the books, though it may have cost at the provider.
"""

from __future__ import annotations

from typing import Any

from parley.core.errors import InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import Principal
from parley.core.ports import Clock, Store, Tx
from parley.core.runtime import Usage
from parley.core.usage import (
    Budget,
    BudgetScope,
    UsageFilter,
    UsageRecord,
    UsageTotal,
    budget_id,
    check_group,
    exhausted,
    spent_beyond,
)
from parley.core.workers import Worker
from parley.service.metrics import HubMetrics


def model_of(usage: Usage, runtime: dict[str, Any], route: str) -> str:
    """The model a call used: what the runtime reported, else the agent's configured model,
    else the runtime's kind (Codex names no model in its events)."""
    return usage.model or str(runtime.get("model") or "") or (route.split(":", 1)[0] or "unknown")


async def tree_of(tx: Tx, channel_id: str, task_id: str | None) -> tuple[str | None, str | None]:
    """The worker whose turn runs in ``channel_id`` (its task ``task_id``) and the root of its
    tree, or (None, None) when no worker runs there."""
    w = tx.table("workers").c
    where = [w.channel_id == channel_id]
    if task_id is not None:
        where.append(w.task_id == task_id)
    rows: list[Worker] = await tx.select("workers", *where, order_by=[w.created.desc()], limit=1)
    if not rows:
        return None, None
    worker = rows[0]
    roots: list[Worker] = await tx.select(
        "workers", w.trace_id == worker.trace_id, w.parent_worker_id.is_(None), limit=1
    )
    return worker.id, (roots[0].id if roots else worker.id)


BUDGETS_FRESH_S = 2.0
"""How long a hub trusts the budgets it read: every turn asks for them, and most hubs have none.
A budget set through this hub applies at once; one set through another hub sharing the store,
within this time."""


class UsageLedger:
    """Records, totals and budgets of token and cost usage; one per hub."""

    def __init__(self, store: Store, clock: Clock, metrics: HubMetrics) -> None:
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self._budgets: list[Budget] | None = None
        self._budgets_read_at = 0.0

    async def _current_budgets(self) -> list[Budget]:
        now = self.clock.monotonic()
        if self._budgets is None or now - self._budgets_read_at > BUDGETS_FRESH_S:
            async with self.store.read() as tx:
                self._budgets = await tx.select("usage_budgets")
            self._budgets_read_at = now
        return self._budgets

    # -- recording --------------------------------------------------------------------------
    async def record(
        self,
        tx: Tx,
        *,
        call_id: str,
        agent_id: str,
        usage: Usage,
        runtime: dict[str, Any],
        route: str,
        channel_id: str | None,
        channel_kind: str = "",
        task_id: str | None = None,
        meeting_id: str | None = None,
    ) -> None:
        """Record one call's usage in ``tx``, if its runtime reported any."""
        if not usage.reported:
            return
        worker_id = tree = None
        if channel_id is not None and channel_kind == "work":
            worker_id, tree = await tree_of(tx, channel_id, task_id)
        now = self.clock.now()
        model = model_of(usage, runtime, route)[:200]
        record = UsageRecord(
            id=call_id,
            agent_id=agent_id,
            model=model,
            runtime=str(runtime.get("kind") or route.split(":", 1)[0] or "unknown")[:32],
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cost_usd=usage.cost_usd,
            channel_id=channel_id,
            discussion_id=channel_id if channel_kind == "discussion" else None,
            meeting_id=meeting_id,
            task_id=task_id,
            worker_id=worker_id,
            worker_tree=tree,
            day=now.date().isoformat(),
            created=now,
        )
        tx.insert("turn_usage", record)
        tx.after_commit(lambda: self.metrics.usage_recorded(record))

    # -- totals -----------------------------------------------------------------------------
    async def totals(self, caller: Principal, by: str | None, flt: UsageFilter) -> list[UsageTotal]:
        """Totals by ``by`` (or one total of all): the operator's over every agent, anyone
        else's over its own turns only."""
        group = check_group(by) if by is not None else None
        viewer = None if caller.is_operator else caller.id
        if flt.worker_tree is not None:
            flt = flt.model_copy(update={"worker_tree": await self.root_of(flt.worker_tree)})
        async with self.store.read() as tx:
            return await tx.usage_totals(group, flt, viewer)

    async def root_of(self, worker_id: str) -> str:
        """The root worker of ``worker_id``'s tree: a tree is named by any of its workers."""
        async with self.store.read() as tx:
            worker: Worker | None = await tx.get("workers", worker_id)
            if worker is None:
                raise NotFound(f"no worker {worker_id!r}", code="worker_not_found")
            w = tx.table("workers").c
            roots: list[Worker] = await tx.select(
                "workers", w.trace_id == worker.trace_id, w.parent_worker_id.is_(None), limit=1
            )
        return roots[0].id if roots else worker.id

    # -- budgets ----------------------------------------------------------------------------
    async def budgets(self, caller: Principal) -> list[tuple[Budget, UsageTotal]]:
        """Every budget with what is spent of it; an agent sees its own only."""
        async with self.store.read() as tx:
            b = tx.table("usage_budgets").c
            rows: list[Budget] = await tx.select("usage_budgets", order_by=[b.id])
            out = []
            for budget in rows:
                if not caller.is_operator and not (
                    budget.scope == "agent" and budget.key == caller.id
                ):
                    continue
                out.append((budget, await self._spent(tx, budget)))
        return out

    async def set_budget(
        self,
        caller: Principal,
        scope: BudgetScope,
        key: str,
        *,
        max_tokens: int | None,
        max_cost_usd: float | None,
    ) -> Budget:
        """Set (or replace) the budget of an agent or of a worker tree (named by any of its
        workers); operator only."""
        self._operator(caller)
        if max_tokens is None and max_cost_usd is None:
            raise InvalidRequest(
                "a budget caps tokens, dollars or both; give max_tokens or max_cost_usd",
                code="invalid_budget",
            )
        if scope == "tree":
            key = await self.root_of(key)
        budget = Budget(
            id=budget_id(scope, key),
            scope=scope,
            key=key,
            max_tokens=max_tokens,
            max_cost_usd=max_cost_usd,
            created_by=caller.id,
            created=self.clock.now(),
        )

        async def job(tx: Tx) -> Budget:
            if scope == "agent":
                agent: Principal | None = await tx.get("principals", key)
                if agent is None or agent.kind != "agent":
                    raise NotFound(f"no agent {key!r}", code="agent_not_found")
            await tx.delete("usage_budgets", budget.id)
            tx.insert("usage_budgets", budget)
            return budget

        try:
            return await self.store.write(job)
        finally:
            self._budgets = None

    async def clear_budget(self, caller: Principal, scope: BudgetScope, key: str) -> bool:
        self._operator(caller)
        if scope == "tree":
            key = await self.root_of(key)

        async def job(tx: Tx) -> int:
            return await tx.delete("usage_budgets", budget_id(scope, key))

        try:
            return bool(await self.store.write(job))
        finally:
            self._budgets = None

    async def check(self, agent_id: str, channel_id: str, channel_kind: str) -> None:
        """Raise :class:`BudgetExhausted` when the agent's budget, or its worker tree's, is
        spent: no turn runs for it then. No read of the store while no budget can apply."""
        rows = await self._current_budgets()
        mine = budget_id("agent", agent_id)
        trees = channel_kind == "work" and any(b.scope == "tree" for b in rows)
        if not trees and all(b.id != mine for b in rows):
            return
        async with self.store.read() as tx:
            wanted = {mine}
            if trees:
                _, tree = await tree_of(tx, channel_id, None)
                if tree is not None:
                    wanted.add(budget_id("tree", tree))
            for budget in rows:
                if budget.id not in wanted:
                    continue
                why = spent_beyond(budget, await self._spent(tx, budget))
                if why is not None:
                    raise exhausted(budget, why)

    async def refuse_spent_tree(self, tx: Tx, worker: Worker) -> None:
        """Raise :class:`BudgetExhausted` when ``worker``'s tree has spent its budget: a spawn
        into it is refused at once rather than given a first turn that would be."""
        w = tx.table("workers").c
        roots: list[Worker] = await tx.select(
            "workers", w.trace_id == worker.trace_id, w.parent_worker_id.is_(None), limit=1
        )
        root = roots[0].id if roots else worker.id
        budget: Budget | None = await tx.get("usage_budgets", budget_id("tree", root))
        if budget is None:
            return
        why = spent_beyond(budget, await self._spent(tx, budget))
        if why is not None:
            raise exhausted(budget, why)

    @staticmethod
    async def _spent(tx: Tx, budget: Budget) -> UsageTotal:
        flt = (
            UsageFilter(agent_id=budget.key)
            if budget.scope == "agent"
            else UsageFilter(worker_tree=budget.key)
        )
        totals = await tx.usage_totals(None, flt, None)
        return totals[0] if totals else UsageTotal(key=None)

    @staticmethod
    def _operator(caller: Principal) -> None:
        if not caller.is_operator:
            raise PermissionDenied("only the operator sets budgets", code="operator_only")
