"""Token and cost accounting: what each turn used, the totals people ask for, and budgets.

A turn's usage is recorded once, with the turn, from what its runtime reported
(:class:`parley.core.runtime.Usage`): the OpenAI and Anthropic APIs report tokens, Claude Code
tokens and its running cost, Codex tokens. Each record names where the turn ran (agent, model,
channel, discussion, meeting, worker tree), so every total is one ``GROUP BY``. A budget caps
what one agent or one worker tree may spend; a turn asked for once it is spent is refused with
``budget_exhausted``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, Field

from parley.core.clock import UtcTime
from parley.core.errors import Conflict, InvalidRequest

UsageGroup = Literal["agent", "day", "model", "tree", "discussion", "meeting", "channel"]
USAGE_GROUPS: tuple[str, ...] = get_args(UsageGroup)
BudgetScope = Literal["agent", "tree"]


class UsageRecord(BaseModel):
    """The usage of one runtime call, with where it ran."""

    id: str
    """The invocation id of the call (or a new id for a call that has no invocation record)."""
    agent_id: str
    model: str
    runtime: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    channel_id: str | None = None
    discussion_id: str | None = None
    meeting_id: str | None = None
    task_id: str | None = None
    worker_id: str | None = None
    worker_tree: str | None = None
    """The root worker of the tree the call's worker belongs to."""
    day: str
    """The UTC day of the call, ``YYYY-MM-DD``: totals by day need no date function."""
    created: datetime


class UsageTotal(BaseModel):
    """The usage of the calls that share one value of a grouping (or of all, ``key`` None)."""

    key: str | None
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    """The sum of the costs runtimes stated; calls that stated none add nothing."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class UsageFilter(BaseModel):
    """Which calls a total counts."""

    agent_id: str | None = None
    model: str | None = None
    channel_id: str | None = None
    discussion_id: str | None = None
    meeting_id: str | None = None
    worker_tree: str | None = None
    since: UtcTime | None = None
    until: UtcTime | None = None


class Budget(BaseModel):
    """What one agent (``scope`` agent, ``key`` its id) or one worker tree (``tree``, its root
    worker's id) may spend; None: no cap on that measure."""

    id: str
    scope: BudgetScope
    key: str
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    created_by: str
    created: datetime


def budget_id(scope: str, key: str) -> str:
    return f"{scope}:{key}"


class BudgetExhausted(Conflict):
    """The budget of this agent or worker tree is spent; no new turn is run for it."""

    code = "budget_exhausted"


def spent_beyond(budget: Budget, spent: UsageTotal) -> str | None:
    """Why ``budget`` refuses another turn after ``spent``, or None while it has room."""
    if budget.max_tokens is not None and spent.tokens >= budget.max_tokens:
        return f"{spent.tokens} of {budget.max_tokens} tokens used"
    if budget.max_cost_usd is not None and spent.cost_usd >= budget.max_cost_usd:
        return f"${spent.cost_usd:.4f} of ${budget.max_cost_usd:.4f} spent"
    return None


def exhausted(budget: Budget, why: str) -> BudgetExhausted:
    what = f"agent {budget.key!r}" if budget.scope == "agent" else f"worker tree {budget.key!r}"
    return BudgetExhausted(
        f"the budget of {what} is spent ({why}); no new turn runs for it until the operator "
        f"raises or removes the budget (parley usage budget set/clear)",
        scope=budget.scope,
        key=budget.key,
    )


def check_group(by: str) -> UsageGroup:
    if by not in USAGE_GROUPS:
        raise InvalidRequest(
            f"cannot total usage by {by!r}; group by one of {', '.join(USAGE_GROUPS)}",
            code="invalid_usage_group",
        )
    return by  # type: ignore[return-value]
