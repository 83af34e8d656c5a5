"""Usage totals: one ``GROUP BY`` over ``turn_usage`` (migration 0007)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, Integer, cast, func, literal, select

from parley.adapters.store import schema as s
from parley.core.usage import UsageFilter

_GROUP_COLUMNS = {
    "agent": "agent_id",
    "day": "day",
    "model": "model",
    "tree": "worker_tree",
    "discussion": "discussion_id",
    "meeting": "meeting_id",
    "channel": "channel_id",
}
_FILTERS = ("agent_id", "model", "channel_id", "discussion_id", "meeting_id", "worker_tree")


def totals_statement(by: str | None, flt: UsageFilter, viewer: str | None) -> Any:
    """The totals of the calls ``flt`` picks (only ``viewer``'s own unless None), one row per
    value of ``by`` (one row in all for None); a grouping by a place counts only calls made
    there."""
    u = s.turn_usage.c
    key = u[_GROUP_COLUMNS[by]] if by is not None else literal(None)
    where: list[Any] = []
    if by is not None:
        where.append(key.is_not(None))
    if viewer is not None:
        where.append(u.agent_id == viewer)
    for name in _FILTERS:
        value = getattr(flt, name)
        if value is not None:
            where.append(u[name] == value)
    if flt.since is not None:
        where.append(u.created >= flt.since)
    if flt.until is not None:
        where.append(u.created < flt.until)

    def total(col: Any) -> Any:
        return cast(func.coalesce(func.sum(col), 0), Integer)

    query = select(
        key.label("key"),
        func.count().label("turns"),
        total(u.input_tokens).label("input_tokens"),
        total(u.output_tokens).label("output_tokens"),
        total(u.cache_read_tokens).label("cache_read_tokens"),
        total(u.cache_write_tokens).label("cache_write_tokens"),
        cast(func.coalesce(func.sum(u.cost_usd), 0.0), Float).label("cost_usd"),
    ).where(*where)
    if by is not None:
        query = query.group_by(key).order_by(key)
    return query
