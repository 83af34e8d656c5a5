"""Mail to a busy worker goes into its live turn (M5 "worker stdin").

Session mail that arrives while a worker's turn runs would otherwise wait for the next turn's
``<pending_mail>`` block: a constraint sent to a worker that is working is read only once the
work is done. When the turn's runtime takes input mid-turn (Claude Code's stream-json input;
the runtime opens the turn's :class:`~parley.core.runtime.TurnInput`), the hub pushes each such
mail into the turn as soon as it is committed, in the same quoted block marked as mail, and
marks it delivered; a child's result the worker blocked on is read there too, and the worker
is no longer blocked on it. A runtime that cannot take input (Codex's ``exec``, the other
command protocols) never opens it: the mail waits for the next turn, as before.

The mail is claimed (marked delivered) before it is sent, so two pushes never send one message
twice; a push the turn did not take (it just ended) gives the claim back, and the mail is read
at the next turn.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from parley.core import workers as wk
from parley.core.mail import Message
from parley.core.ports import Tx
from parley.core.runtime import Turn, TurnInput
from parley.core.workers import Worker
from parley.service.mail.mailbox import inbox_topic
from parley.service.workers import results as worker_results
from parley.service.workers.records import WorkerRecords

log = logging.getLogger("parley.service.workers")

BATCH = 50


async def push_while_running(workers: WorkerRecords, turn: Turn) -> None:
    """Beside a turn (a task hook): once its runtime opens its input, push the session's
    pending mail into it, then each new one as it is committed, until the turn ends (this is
    cancelled)."""
    live = turn.live_input
    if live is None:
        return
    opened = asyncio.Event()
    live.on_open(opened.set)
    await opened.wait()
    async with workers.ctx.store.read() as tx:
        worker = await workers.of_channel(tx, turn.channel_id)
    if worker is None or worker.session_id != turn.session_id:
        return  # not a worker's turn: its mail is read at its next turn, as any agent's
    # Subscribed before looking, so a message committed in between is not missed.
    sub = workers.ctx.bus.subscribe([inbox_topic(turn.agent.id)])
    try:
        await push_pending(workers, worker, live)
        while True:
            data = await sub.get()
            if data.get("type") == "overflow" or _for_session(data, turn.session_id):
                await push_pending(workers, worker, live)
    finally:
        await sub.close()


def _for_session(data: dict[str, Any], session_id: str) -> bool:
    message = data.get("message") or {}
    return bool(message.get("to_kind") == "session" and message.get("to_id") == session_id)


async def push_pending(workers: WorkerRecords, worker: Worker, live: TurnInput) -> int:
    """Push the session's pending mail into the live turn; how many messages it took."""
    if not live.is_open:
        return 0
    claimed, unblocked = await workers.ctx.store.write(lambda tx: _claim(workers, tx, worker))
    if not claimed:
        return 0
    text = wk.mail_block([(m.kind, m.from_id, m.subject, m.body) for m in claimed], live=True)
    if await live.push(text):
        return len(claimed)
    # The turn ended before it took the mail: the next turn reads it. Shielded: a claim left
    # standing would hide the mail from every later turn.
    await asyncio.shield(
        workers.ctx.store.write(lambda tx: _give_back(workers, tx, worker, claimed, unblocked))
    )
    return 0


async def _claim(
    workers: WorkerRecords, tx: Tx, worker: Worker
) -> tuple[list[Message], str | None]:
    """Mark the pending session mail delivered, and the worker no longer blocked when the
    result it waits for is among it, in one commit before the push: whoever sees the mail as
    delivered sees the worker unblocked too."""
    m = tx.table("messages").c
    rows: list[Message] = await tx.select(
        "messages",
        m.to_kind == "session",
        m.to_id == worker.session_id,
        m.status == "pending",
        # A takeover is delivered as a takeover envelope, never as information in a block.
        m.kind != "takeover",
        order_by=[m.seq],
        limit=BATCH,
    )
    if not rows:
        return [], None
    marked = set(await tx.mark_delivered([r.id for r in rows], workers.ctx.clock.now()))
    claimed = [r for r in rows if r.id in marked]
    if not claimed:
        return [], None
    workers.ctx.events.record(
        tx,
        "worker.mail_pushed",
        actor="system",
        subject=f"worker:{worker.id}",
        payload={
            "message_ids": [c.id for c in claimed],
            "kinds": sorted({c.kind for c in claimed}),
        },
        trace_id=worker.trace_id,
        span_id=worker.span_id,
    )
    current: Worker | None = await tx.get("workers", worker.id, for_update=True)
    results = {c.correlation_id for c in claimed if c.kind == "task-result"}
    blocked_on = current.blocked_on_message_id if current is not None else None
    if current is None or blocked_on is None or blocked_on not in results:
        return claimed, None
    # The result it blocked on is read in this turn: nothing is left to wake it for.
    await tx.update("workers", worker.id, blocked_on_message_id=None)
    workers.publish(tx, current.model_copy(update={"blocked_on_message_id": None}))
    return claimed, blocked_on


async def _give_back(
    workers: WorkerRecords,
    tx: Tx,
    worker: Worker,
    claimed: list[Message],
    unblocked: str | None,
) -> None:
    for message in claimed:
        row: Message | None = await tx.get("messages", message.id, for_update=True)
        if row is not None and row.status == "delivered":
            await tx.update("messages", message.id, status="pending", delivered_at=None)
    workers.ctx.events.record(
        tx,
        "worker.mail_not_taken",
        actor="system",
        subject=f"worker:{worker.id}",
        payload={"message_ids": [c.id for c in claimed]},
        trace_id=worker.trace_id,
    )
    if unblocked is None:
        return
    current: Worker | None = await tx.get("workers", worker.id, for_update=True)
    if current is None or current.terminal or current.blocked_on_message_id is not None:
        return
    await tx.update("workers", worker.id, blocked_on_message_id=unblocked)
    current = current.model_copy(update={"blocked_on_message_id": unblocked})
    workers.publish(tx, current)
    # Its turn may have ended meanwhile: then the result wakes it now, as at a turn's end.
    await worker_results.wake_after_turn(workers, tx, current)
