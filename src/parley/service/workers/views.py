"""What the worker tree looks like to a caller (SPEC W8): one worker, the caller's workers, a
trace's child tree, a logical session's topology, and artifacts. Functions over a worker's
records (:class:`~.records.WorkerRecords`); the :class:`~.workers.Workers` service exposes them
as its methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from parley.core import workers as wk
from parley.core.channels import LogicalSession
from parley.core.errors import InvalidRequest, NotFound
from parley.core.identity import Principal
from parley.core.limits import check_text
from parley.core.mail import Message
from parley.core.ports import Tx
from parley.core.workers import Artifact, Worker
from parley.service.workers.records import WorkerRecords

LIST_MAX = 1000


async def get(workers: WorkerRecords, caller: Principal, worker_id: str) -> Worker:
    async with workers.ctx.store.read() as tx:
        return await workers.visible(tx, caller, worker_id)


async def listing(
    workers: WorkerRecords, caller: Principal, *, state: Sequence[str] = (), limit: int = 200
) -> list[Worker]:
    """Workers the caller may see, newest first, at most ``limit`` (1 to 1000)."""
    for s in state:
        if s not in wk.WORKER_STATES:
            # The code REST and MCP give for it, from the states in their schemas.
            raise InvalidRequest(
                f"worker state {s!r} is unknown; use one of {', '.join(wk.WORKER_STATES)}",
                code="validation_error",
            )
    limit = max(1, min(limit, LIST_MAX))
    async with workers.ctx.store.read() as tx:
        t = tx.table("workers")
        w = t.c
        if caller.is_operator:
            where = [w.state.in_(list(state))] if state else []
            return await tx.select("workers", *where, order_by=[w.id.desc()], limit=limit)
        # Whatever else a caller sees lies in a trace where it runs, started or spawned a worker
        # (a worker's ancestors share its trace): those traces, in one query, and the rule on
        # each of their workers with its parent chain among them.
        mine = t.select().with_only_columns(w.trace_id)
        mine = mine.where((w.agent_id == caller.id) | (w.created_by == caller.id))
        rows: list[Worker] = await tx.select("workers", w.trace_id.in_(mine))
    seen = [r for r in wk.visible(caller, rows) if not state or r.state in state]
    return sorted(seen, key=lambda r: r.id, reverse=True)[:limit]


async def tree(workers: WorkerRecords, caller: Principal, worker_id: str) -> list[dict[str, Any]]:
    """The worker's trace as a child tree: the workers sharing its trace id that the caller may
    see (:func:`nested`)."""
    async with workers.ctx.store.read() as tx:
        worker = await workers.visible(tx, caller, worker_id)
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select("workers", w.trace_id == worker.trace_id)
    return nested(workers, wk.visible(caller, rows))


def nested(workers: WorkerRecords, rows: Iterable[Worker]) -> list[dict[str, Any]]:
    """Workers as the child tree every surface shows, nested at most as deep as the depth limit
    (:func:`~parley.core.workers.topology`). The rows are the ones the caller may see: what it
    sees is closed downwards, so a visible worker whose parent is hidden (a child's agent looking
    at its own worker) is a root, and the rest of the tree above it is not shown."""
    return wk.topology(rows, nesting=workers.ctx.settings.worker_max_depth)


async def topology(workers: WorkerRecords, caller: Principal, session_id: str) -> dict[str, Any]:
    """A logical session's workers, the child tree under them, the child sessions and the
    session's mail (W8)."""
    check_text(session_id, "session id")
    async with workers.ctx.store.read() as tx:
        session: LogicalSession | None = await tx.get("sessions", session_id)
        if session is None:
            raise NotFound(f"no session {session_id!r}", code="session_not_found")
        w = tx.table("workers").c
        own: list[Worker] = await tx.select("workers", w.session_id == session_id, order_by=[w.id])
        traces = {x.trace_id for x in own}
        tree: list[Worker] = (
            await tx.select("workers", w.trace_id.in_(list(traces))) if traces else []
        )
        seen = wk.visible(caller, tree)
        seen_ids = {x.id for x in seen}
        own = [x for x in own if x.id in seen_ids]
        if not (caller.is_operator or caller.id == session.agent_id or own):
            raise NotFound(f"no session {session_id!r}", code="session_not_found")
        # Child sessions (and their mail) are shown when one of their workers is.
        seen_sessions = {x.session_id for x in seen}
        sessions = [s for s in await _child_sessions(tx, session_id) if s.id in seen_sessions]
        m = tx.table("messages").c
        mail: list[Message] = await tx.select(
            "messages",
            m.to_kind == "session",
            m.to_id.in_([session_id, *(s.id for s in sessions)]),
            order_by=[m.id],
            limit=500,
        )
    return {
        "session": _session_view(caller, session),
        "workers": [x.model_dump(mode="json") for x in own],
        "tree": nested(workers, seen),
        "child_sessions": [_session_view(caller, s) for s in sessions],
        "messages": [
            {
                "id": x.id,
                "kind": x.kind,
                "from_id": x.from_id,
                "to": f"session:{x.to_id}",
                "subject": x.subject,
                "status": x.status,
                "created": x.created.isoformat(),
            }
            for x in mail
        ],
    }


def _session_view(caller: Principal, session: LogicalSession) -> dict[str, Any]:
    data = session.model_dump(mode="json")
    if not (caller.is_operator or caller.id == session.agent_id):
        # A runtime's session state is the agent's business (and may name its files).
        data["runtime_state"] = None
    return data


async def _child_sessions(tx: Tx, session_id: str) -> list[LogicalSession]:
    found: list[LogicalSession] = []
    frontier = [session_id]
    s = tx.table("sessions").c
    while frontier and len(found) < 1000:
        rows: list[LogicalSession] = await tx.select(
            "sessions", s.parent_logical_id.in_(frontier), order_by=[s.id]
        )
        found.extend(rows)
        frontier = [r.id for r in rows]
    return found


async def artifact(workers: WorkerRecords, caller: Principal, artifact_id: str) -> Artifact:
    check_text(artifact_id, "artifact id")
    async with workers.ctx.store.read() as tx:
        art: Artifact | None = await tx.get("worker_artifacts", artifact_id)
        if art is None:
            raise NotFound(f"no artifact {artifact_id!r}", code="artifact_not_found")
        worker: Worker | None = await tx.get("workers", art.worker_id)
        # Whoever may see the worker, which includes the agent of its parent (an ancestor).
        ok = worker is not None and await workers.may_see(tx, caller, worker)
    if not ok:
        raise NotFound(f"no artifact {artifact_id!r}", code="artifact_not_found")
    return art


async def session_names(tx: Tx, session_ids: Iterable[str]) -> dict[str, str]:
    """The display names of some logical sessions, by id, in one read (missing ones left out):
    a worker's children are named after their sessions."""
    s = tx.table("sessions").c
    wanted = sorted(set(session_ids))
    sessions: list[LogicalSession] = await tx.select("sessions", s.id.in_(wanted))
    return {session.id: session.display_name for session in sessions}
