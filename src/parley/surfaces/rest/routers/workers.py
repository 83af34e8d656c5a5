"""Workers (W2–W8): start a root worker, spawn children, report results, cancel subtrees, take
over, resume, release and heartbeat; one worker, a listing, a trace's child tree, a logical
session's topology, artifacts, and a live stream of a worker and its descendants."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from sse_starlette.sse import EventSourceResponse

from parley.core import workers as wk
from parley.core.limits import StorableText
from parley.core.workers import Artifact, Worker
from parley.service.workers.control import MAX_TAKEOVER_TIMEOUT_S
from parley.service.workers.records import WORKERS_TOPIC, ResultSpec, SpawnSpec, StartSpec
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES
from parley.surfaces.rest.sse import BackfillPage, SseItem, stream

router = APIRouter(tags=["workers"], responses=ERROR_RESPONSES)

_SSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "Server-sent events"}
}


class CancelRequest(BaseModel):
    reason: StorableText = Field(
        default="cancelled", min_length=1, max_length=wk.CANCEL_REASON_MAX_CHARS
    )
    propagate_to_children: bool = Field(
        default=True, description="Cancel the subtree too, except independent children."
    )
    force: bool = Field(
        default=False, description="Do not wait for the runtimes' own stop: cancel outright."
    )


class CancelOut(BaseModel):
    cancelled: list[Worker] = Field(description="The workers cancelled, the named one first.")


class TakeoverRequest(BaseModel):
    instruction: StorableText = Field(max_length=wk.INSTRUCTION_MAX_CHARS)
    interrupt_first: bool = True
    timeout_s: float = Field(
        default=5.0,
        description=f"Seconds to wait for the running turn to end (0-{MAX_TAKEOVER_TIMEOUT_S:g}).",
    )


class TakeoverOut(BaseModel):
    """What a takeover did; ``message_id`` is the takeover mail that tracks it."""

    worker: Worker
    message_id: str
    interrupted: bool
    timed_out: bool
    waited_ms: float
    task_id: str | None


class ResumeRequest(BaseModel):
    note: StorableText = Field(default="", max_length=wk.INSTRUCTION_MAX_CHARS)


class HeartbeatRequest(BaseModel):
    long_running: bool | None = Field(
        default=None,
        description="Set (true) or clear (false) the marker that keeps it from "
        "being called stale; leave out to keep it as it is.",
    )


class WorkerNode(BaseModel):
    """One worker of a child tree, with its children. A tree nests at most as deep as the hub's
    worker_max_depth: a worker below that is a root of its own, and so is one whose parent the
    caller may not see; ``parent_worker_id`` says where such a root belongs."""

    id: str
    agent_id: str
    session_id: str
    state: str
    independent: bool
    cancel_propagated_from: str | None
    parent_worker_id: str | None
    children: list[WorkerNode]


class SessionOut(BaseModel):
    """A logical session; its runtime's own state only for its agent and the operator (null
    for anyone else)."""

    id: str
    agent_id: str
    channel_id: str
    display_name: str
    created: datetime
    parent_logical_id: str | None
    spawned_by_worker_id: str | None
    spawn_purpose: str | None
    runtime_state: dict[str, Any] | None = None


class SessionMail(BaseModel):
    id: str
    kind: str
    from_id: str
    to: str
    subject: str
    status: str
    created: datetime


class TopologyOut(BaseModel):
    """A logical session's workers, the child tree under them, child sessions and mail (W8)."""

    session: SessionOut
    workers: list[Worker]
    tree: list[WorkerNode]
    child_sessions: list[SessionOut]
    messages: list[SessionMail]


# -- workers ---------------------------------------------------------------------------------------
@router.get("/v1/workers", response_model=list[Worker])
async def list_workers(
    caller: Caller,
    hub: HubDep,
    state: Annotated[list[wk.WorkerState] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[Worker]:
    """Workers the caller may see, newest first: the operator all, an agent its own and those
    it started, spawned or is above; ``state`` (repeatable) keeps only those states."""
    return await hub.workers.listing(caller, state=state or (), limit=limit)


@router.post("/v1/workers", response_model=Worker, status_code=201)
async def start(body: StartSpec, caller: Caller, hub: HubDep) -> Worker:
    """Start a root worker: a new logical session of the agent with its own private channel,
    its first turn started with the prompt."""
    return await hub.workers.start(caller, body)


@router.get("/v1/workers/{worker_id}", response_model=Worker)
async def get_worker(worker_id: str, caller: Caller, hub: HubDep) -> Worker:
    return await hub.workers.get(caller, worker_id)


@router.post("/v1/workers/{worker_id}/spawn", response_model=Worker, status_code=201)
async def spawn(worker_id: str, body: SpawnSpec, caller: Caller, hub: HubDep) -> Worker:
    """Spawn a child of the worker (W3): a child session ``"<parent> / <slug>"``, the
    task-dispatch mail and the child's first turn, in one commit. Its result comes back to
    the parent's session as a task-result mail."""
    return await hub.workers.spawn(caller, worker_id, body)


@router.post("/v1/workers/{worker_id}/cancel", response_model=CancelOut)
async def cancel(worker_id: str, body: CancelRequest, caller: Caller, hub: HubDep) -> CancelOut:
    """Cancel the worker and, unless told not to, its subtree except independent children
    (W4); answers once their turns have stopped."""
    cancelled = await hub.workers.cancel(
        caller,
        worker_id,
        reason=body.reason,
        propagate=body.propagate_to_children,
        force=body.force,
    )
    return CancelOut(cancelled=cancelled)


@router.post("/v1/workers/{worker_id}/takeover", response_model=TakeoverOut)
async def takeover(
    worker_id: str, body: TakeoverRequest, caller: Caller, hub: HubDep
) -> TakeoverOut:
    """Take over the worker in one step (W5): interrupt its running turn, wait for it to end
    (at most ``timeout_s``), and start its next turn with the takeover envelope."""
    outcome = await hub.workers.takeover(
        caller,
        worker_id,
        body.instruction,
        interrupt_first=body.interrupt_first,
        timeout_s=body.timeout_s,
    )
    return TakeoverOut.model_validate(outcome, from_attributes=True)


@router.post("/v1/workers/{worker_id}/resume", response_model=Worker)
async def resume(
    worker_id: str, caller: Caller, hub: HubDep, body: ResumeRequest | None = None
) -> Worker:
    """Resume an interrupted, stale or idle worker: a new turn that says it was interrupted,
    with the session's pending mail in front."""
    return await hub.workers.resume(caller, worker_id, body.note if body else "")


@router.post("/v1/workers/{worker_id}/release", response_model=Worker)
async def release(worker_id: str, caller: Caller, hub: HubDep) -> Worker:
    """Let an idle or stale worker go for good (released)."""
    return await hub.workers.release(caller, worker_id)


@router.post("/v1/workers/{worker_id}/heartbeat", response_model=Worker)
async def heartbeat(
    worker_id: str, caller: Caller, hub: HubDep, body: HeartbeatRequest | None = None
) -> Worker:
    """A sign of life from the worker's agent (W6); a stale worker runs again."""
    long_running = body.long_running if body else None
    return await hub.workers.heartbeat(caller, worker_id, long_running=long_running)


@router.post("/v1/workers/{worker_id}/result", response_model=Worker)
async def report_result(worker_id: str, body: ResultSpec, caller: Caller, hub: HubDep) -> Worker:
    """The child's own agent reports its result: the worker completes or fails and the parent
    gets the task-result (a summary over the budget travels as an artifact reference)."""
    return await hub.workers.report_result(caller, worker_id, body)


@router.get("/v1/workers/{worker_id}/tree", response_model=list[WorkerNode])
async def tree(worker_id: str, caller: Caller, hub: HubDep) -> list[WorkerNode]:
    """The worker's trace as a child tree: every worker that shares its trace id and that the
    caller may see."""
    return [WorkerNode.model_validate(n) for n in await hub.workers.tree(caller, worker_id)]


@router.get(
    "/v1/workers/{worker_id}/stream",
    response_class=EventSourceResponse,
    tags=["streams"],
    responses=_SSE,
)
async def worker_stream(
    worker_id: str, request: Request, caller: Caller, hub: HubDep
) -> EventSourceResponse:
    """The live state of a worker and its descendants: first a ``tree`` event (the workers as
    they are now, flat and as a tree), then a ``worker`` event per change of any of them,
    children spawned meanwhile included. The stream ends once the worker and every
    descendant have ended. A reconnecting client gets the current tree again (the ids count
    one connection's events); the event log keeps the history."""
    root = await hub.workers.get(caller, worker_id)
    watched: dict[str, Worker] = {}
    counter = {"n": 0}

    def next_id() -> str:
        counter["n"] += 1
        return str(counter["n"])

    def all_ended() -> bool:
        return all(w.terminal for w in watched.values())

    async def backfill(last: str | None) -> BackfillPage:
        async with hub.store.read() as tx:
            w = tx.table("workers").c
            rows: list[Worker] = await tx.select("workers", w.trace_id == root.trace_id)
        watched.clear()
        watched.update({r.id: r for r in descendants(root.id, rows)})
        ordered = sorted(watched.values(), key=lambda x: (x.created, x.id))
        data = {
            "worker_id": root.id,
            "workers": [x.model_dump(mode="json") for x in ordered],
            "tree": wk.topology(ordered, nesting=hub.settings.worker_max_depth),
        }
        return BackfillPage([SseItem(next_id(), "tree", data)], more=False)

    def from_live(data: dict[str, Any]) -> SseItem | None:
        if data.get("type") != "worker":
            return None
        worker = Worker.model_validate(data["worker"])
        seen = watched.get(worker.id)
        if seen is None and worker.parent_worker_id not in watched:
            return None  # another trace, or outside this subtree
        if seen is not None and worker.updated < seen.updated:
            return None  # an older change, already overtaken by what was sent
        watched[worker.id] = worker
        return SseItem(next_id(), "worker", worker.model_dump(mode="json"))

    return stream(
        request,
        hub.bus,
        [WORKERS_TOPIC],
        after=None,
        backfill=backfill,
        from_live=from_live,
        order=int,
        until=lambda _item: all_ended(),
    )


def descendants(root_id: str, rows: list[Worker]) -> list[Worker]:
    """``root_id`` and every worker below it among ``rows`` (one trace)."""
    children: dict[str | None, list[Worker]] = {}
    for r in rows:
        children.setdefault(r.parent_worker_id, []).append(r)
    found: dict[str, Worker] = {}
    frontier = [r for r in rows if r.id == root_id]
    while frontier:
        current = frontier.pop()
        if current.id not in found:
            found[current.id] = current
            frontier += children.get(current.id, [])
    return list(found.values())


# -- sessions and artifacts ------------------------------------------------------------------------
@router.get("/v1/sessions/{session_id}/topology", response_model=TopologyOut)
async def topology(session_id: str, caller: Caller, hub: HubDep) -> TopologyOut:
    """A logical session's workers, the child tree under them, the child sessions and the
    session's mail (W8); for the session's agent, whoever may see one of its workers, and the
    operator."""
    return TopologyOut.model_validate(await hub.workers.topology(caller, session_id))


@router.get("/v1/artifacts/{artifact_id}", response_model=Artifact)
async def artifact(artifact_id: str, caller: Caller, hub: HubDep) -> Artifact:
    """An artifact a worker produced, e.g. a result summary over the budget: for whoever may
    see the worker, and the agent of its parent."""
    return await hub.workers.artifact(caller, artifact_id)
