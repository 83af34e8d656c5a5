"""What a task, a discussion, a meeting or a worker waits for, shown beside it: whom, since when
and until when (a remote agent's turn and its deadline, an initiator's summary and when it is
reminded, a worker blocked on a mail or interrupted until a person resumes it).

The pages have passed the service's visibility checks for the tasks, channels, meetings and
workers they hand in; these reads only add what those records wait on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from parley.core.channels import Channel, PendingTurn, Task
from parley.core.rooms import Meeting
from parley.core.workers import Worker
from parley.service.conversations.discussions import channel_last_activity
from parley.service.hub import Hub


@dataclass(frozen=True)
class Wait:
    """One thing something waits for: ``who`` is to do ``what``; it has waited since ``since``
    and ``until`` (what happens then: ``then``) is the end of the wait, if it has one."""

    who: str
    what: str
    since: datetime | None = None
    until: datetime | None = None
    then: str = ""


def _turn_wait(turn: PendingTurn, *, minutes: bool = False) -> Wait:
    said = "its minutes of the meeting" if minutes else f"its turn in round {turn.round or 1}"
    return Wait(
        who=turn.agent_id,
        what=f"{said} (a remote agent: speak or no_reply)",
        since=turn.created,
        until=turn.deadline,
        then="deadline",
    )


async def pending_turns(
    hub: Hub, *, task_ids: list[str] | None = None, channel_id: str = ""
) -> list[Any]:
    """The remote turns still unanswered of these tasks, or of a channel (a meeting's)."""
    if not task_ids and not channel_id:
        return []
    async with hub.store.read() as tx:
        p = tx.table("pending_turns").c
        where = p.task_id.in_(list(task_ids)) if task_ids else p.channel_id == channel_id
        found: list[Any] = await tx.select(
            "pending_turns", where, p.status == "pending", order_by=[p.created], limit=100
        )
    return found


async def task_waits(hub: Hub, tasks: list[Task]) -> dict[str, list[Wait]]:
    """The running tasks' waits by task id: each remote member whose turn is pending."""
    running = [t.id for t in tasks if t.status == "running"]
    waits: dict[str, list[Wait]] = {}
    for turn in await pending_turns(hub, task_ids=running):
        waits.setdefault(turn.task_id or "", []).append(_turn_wait(turn))
    return waits


def discussion_wait(hub: Hub, channel: Channel, tasks: list[Task]) -> Wait | None:
    """An open discussion with no task running waits for its initiator's summary
    (discuss_callback); the hub reminds the initiator once it has been idle long enough."""
    meta = channel.metadata
    if meta.get("mode") != "discussion" or channel.status != "active":
        return None
    if any(t.status == "running" for t in tasks):
        return None
    since = channel_last_activity(channel)
    stale = timedelta(seconds=hub.settings.discussion_stale_s)
    return Wait(
        who=str(meta.get("initiatorAgentId") or "the initiator"),
        what="the summary (discuss_callback) that finishes this discussion",
        since=since,
        until=since + stale,
        then="reminded",
    )


def meeting_waits(turns: list[Any], meeting: Meeting) -> list[Wait]:
    """A running meeting's remote turns: speeches, or once its end reason is stored while it
    still runs (its minutes phase), each member's minutes."""
    minutes = meeting.status == "running" and meeting.end_reason is not None
    return [_turn_wait(t, minutes=minutes) for t in turns]


def worker_wait(worker: Worker) -> Wait | None:
    """What a worker that is not working waits for."""
    if worker.state == "interrupted":
        return Wait("a person", "a review, then resume (or cancel)", worker.updated)
    if worker.state == "stale":
        return Wait(worker.agent_id, "a sign of life (or release)", worker.last_heartbeat)
    if worker.pending_takeover_message_id:
        return Wait(worker.agent_id, "to take the held takeover instruction", worker.updated)
    if worker.blocked_on_message_id:
        return Wait("its children", "their results (blocking the parent)", worker.updated)
    if worker.state == "idle":
        return Wait(worker.agent_id, "more work", worker.updated)
    if worker.state == "pending":
        return Wait(worker.agent_id, "its first turn to start", worker.created)
    return None
