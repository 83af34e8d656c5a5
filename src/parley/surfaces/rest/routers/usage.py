"""Token and cost usage: totals by agent, day, model, worker tree, discussion, meeting or
channel, and budgets (operator sets them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from parley.core.usage import Budget, UsageFilter, UsageGroup, UsageTotal, spent_beyond
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["usage"], responses=ERROR_RESPONSES)


class UsageTotalOut(UsageTotal):
    tokens_total: int = 0


class UsageReport(BaseModel):
    """One total of everything picked, and the totals by ``by`` when asked."""

    by: UsageGroup | None
    total: UsageTotalOut
    groups: list[UsageTotalOut]


def _out(total: UsageTotal) -> UsageTotalOut:
    return UsageTotalOut(**total.model_dump(), tokens_total=total.tokens)


@router.get("/v1/usage", response_model=UsageReport)
async def usage_totals(
    caller: Caller,
    hub: HubDep,
    by: UsageGroup | None = None,
    agent: str | None = None,
    model: str | None = None,
    channel: str | None = None,
    discussion: str | None = None,
    meeting: str | None = None,
    worker: Annotated[str | None, Query(description="Any worker of the tree to total.")] = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> UsageReport:
    """Tokens and cost of the turns picked, in all and by ``by``. The operator sees every
    agent's; anyone else its own turns only."""
    flt = UsageFilter(
        agent_id=agent,
        model=model,
        channel_id=channel,
        discussion_id=discussion,
        meeting_id=meeting,
        worker_tree=worker,
        since=since,
        until=until,
    )
    whole = await hub.usage.totals(caller, None, flt)
    groups = await hub.usage.totals(caller, by, flt) if by is not None else []
    total = whole[0] if whole else UsageTotal(key=None)
    return UsageReport(by=by, total=_out(total), groups=[_out(g) for g in groups])


class BudgetIn(BaseModel):
    scope: Literal["agent", "tree"]
    key: str = Field(description="The agent's id, or any worker of the tree.")
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)


class BudgetOut(BaseModel):
    budget: Budget
    spent: UsageTotalOut
    exhausted: bool


@router.get("/v1/usage/budgets", response_model=list[BudgetOut])
async def list_budgets(caller: Caller, hub: HubDep) -> list[BudgetOut]:
    """Budgets with what is spent of each; an agent sees its own only."""
    return [
        BudgetOut(budget=b, spent=_out(t), exhausted=spent_beyond(b, t) is not None)
        for b, t in await hub.usage.budgets(caller)
    ]


@router.put("/v1/usage/budgets", response_model=Budget)
async def set_budget(body: BudgetIn, caller: Caller, hub: HubDep) -> Budget:
    """Set or replace a budget (operator only). Once what the agent or tree has used reaches
    it, its turns are refused with ``budget_exhausted``."""
    return await hub.usage.set_budget(
        caller,
        body.scope,
        body.key,
        max_tokens=body.max_tokens,
        max_cost_usd=body.max_cost_usd,
    )


@router.delete("/v1/usage/budgets/{scope}/{key}")
async def clear_budget(
    scope: Literal["agent", "tree"], key: str, caller: Caller, hub: HubDep
) -> dict[str, bool]:
    """Remove a budget (operator only)."""
    return {"removed": await hub.usage.clear_budget(caller, scope, key)}
