"""Worker tools (W2–W8): hand a task to a child worker, report a child's result, cancel a
subtree, take over a running worker, and look at workers and their sessions. Each description
states the rules the hub enforces (source 002 §5.7: the description is the manual).

Which worker a call means when it names none comes from where the call is made: inside a turn
(an API agent's function call, or a CLI's MCP call made with its turn's token), the worker bound
to that turn's channel (the turn of a child spawns a grandchild, and reports its own result);
over MCP with the agent's own token, the service's own default (the caller's main worker to
spawn from, its one unfinished child to report for).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from parley.core import workers as wk
from parley.core.errors import InvalidRequest
from parley.core.workers import Worker
from parley.service.tools.registry import ToolCall, agent_tool, without_empty
from parley.service.workers.control import MAX_TAKEOVER_TIMEOUT_S
from parley.service.workers.records import ResultSpec, SpawnSpec

LIST_LIMIT = 50
ARTIFACT_READ_CHARS = 8000

SPAWN_CHILD = f"""\
Hand a task to a child worker: a new session '<parent> / <slug of prompt>' with its own \
private channel, a task-dispatch mail and its first turn, at once. Parent: parent_worker_id, \
else the worker of the turn you are in, else your main worker. agent_id runs it (default: the \
parent's agent; another agent must accept channels from you). The child's summary comes back \
to the parent's session as a task-result mail; one over {wk.DEFAULT_RESULT_BUDGET_TOKENS} \
tokens is stored as an artifact and the parent gets its id (read_artifact). block_parent: the \
result wakes the parent. independent: cancelling the parent does not stop it. Counts against \
your send quota (quota_exceeded). Refused: worker_not_found (a parent you may not see), \
worker_too_deep (a child too far below its root), worker_too_many_children (the parent has as \
many unfinished children as allowed), worker_finished, membership_consent_required."""

REPORT_RESULT = f"""\
Finish a child task: the worker completes (success) or fails, and its parent gets a \
task-result mail (a blocked parent is woken). Answering the task's turn with speak does the \
same, with your text as the summary; use this to attach artifacts or report failure. \
worker_id: default the worker of your turn, else your only unfinished child worker. Keep the \
summary short: over {wk.DEFAULT_RESULT_BUDGET_TOKENS} tokens it is stored as an artifact and the \
parent gets a reference. The task's turn ends here: nothing after it is posted. Refused: \
worker_required, worker_not_found, worker_forbidden (not your worker), not_a_child (a root \
worker: it has no parent), worker_finished."""

CANCEL_WORKER = """\
Cancel a worker and, with propagate_to_children, its subtree, except independent children \
(they and theirs keep running). Their turns are really stopped; force does not wait for a \
runtime's own stop. Returns the workers cancelled (cancel_propagated_from: whose cancel \
reached each); the parent of the top one gets a failed task-result. Refused: worker_not_found \
(a worker you may not see), worker_forbidden (only the operator and the worker's parent: \
whoever started or spawned it, or an ancestor's agent), worker_finished."""

TAKEOVER = f"""\
Take over a worker you control, in one step: interrupt its running turn (interrupt_first; \
otherwise let it finish), wait for it to end (at most timeout_s, 0-{MAX_TAKEOVER_TIMEOUT_S:g}), \
then start its next turn with an envelope that says plainly it is a takeover of an interrupted \
turn, with your instruction. Until that turn ends the worker is never called stale. Returns \
message_id (the takeover mail), interrupted, timed_out, task_id. Refused: worker_not_found, \
worker_forbidden, worker_not_takeable (pending or ended), takeover_pending (one at a time), \
empty_instruction."""

TOPOLOGY = """\
A session's map: the session, its workers, the child tree of their trace (each worker's \
state), the child sessions and the session's mail, as far as you may see them: a worker whose \
parent is hidden from you is a root. session_id: default the session of your turn's worker, \
else of your main worker. Only for sessions you run, spawned or control (session_not_found)."""

WORKER_STATUS = f"""\
One worker (worker_id), or the workers you can see (yours and those you spawned), newest \
first, at most {LIST_LIMIT}, optionally only some states. States: pending, running, idle, \
stale, interrupted (waits for a resume); released, completed, failed, killed are final."""

HEARTBEAT = f"""\
Tell the hub your worker is alive (default: every unfinished worker of yours). A running or \
idle worker silent for longer than the stale threshold (default {wk.DEFAULT_STALE_AFTER_S:g} s) \
becomes stale; a heartbeat makes a stale one run again. long_running: true keeps it from being \
called stale at all, false clears that. Refused: worker_not_found, worker_forbidden (not your \
worker), worker_finished."""

READ_ARTIFACT = f"""\
Read an artifact, e.g. a child's result summary that was over the budget (its id is in the \
task-result). At most limit characters from offset (default {ARTIFACT_READ_CHARS}); \
next_offset says where the rest starts. For the worker's agent and its parent."""


def worker_view(worker: Worker) -> dict[str, Any]:
    """A worker as an agent reads it: bookkeeping of the hub left out."""
    data = worker.model_dump(mode="json")
    if worker.result is not None:
        data["result"] = without_empty(data["result"])
    return without_empty(
        data, drop=("owner", "span_id", "parent_span_id", "created", "updated", "ended")
    )


def brief_view(worker: Worker) -> dict[str, Any]:
    """A worker as one line of a listing."""
    return without_empty(
        {
            "id": worker.id,
            "agent_id": worker.agent_id,
            "state": worker.state,
            "purpose": worker.purpose,
            "session_id": worker.session_id,
            "channel_id": worker.channel_id,
            "parent_worker_id": worker.parent_worker_id,
            "end_reason": worker.end_reason,
        }
    )


async def callers_worker(call: ToolCall, channel_id: str | None) -> Worker | None:
    """The caller's unfinished worker bound to ``channel_id``, if there is one (none is made)."""
    if channel_id is None:
        return None
    hub = call.hub
    async with hub.store.read() as tx:
        worker = await hub.workers.of_channel(tx, channel_id)
    return worker if worker is not None and worker.agent_id == call.caller.id else None


async def turn_worker(call: ToolCall) -> Worker | None:
    """The caller's worker of the turn the call is made in; None for a call made in no turn
    (MCP with the agent's own token) or when the turn's channel holds no worker of the
    caller."""
    return await callers_worker(call, call.channel_id)


@agent_tool(SPAWN_CHILD)
async def spawn_child(
    call: ToolCall,
    prompt: Annotated[str, Field(min_length=1, max_length=wk.PROMPT_MAX_CHARS)],
    parent_worker_id: Annotated[str | None, Field(max_length=64)] = None,
    agent_id: Annotated[str | None, Field(max_length=64)] = None,
    purpose: Annotated[
        str, Field(min_length=1, max_length=64, description="task-dispatch, research, verify…")
    ] = "task-dispatch",
    inherit_context: Annotated[bool, Field(description="quote the parent's recent work")] = True,
    block_parent: bool = False,
    independent: bool = False,
    expected_artifacts: Annotated[list[str] | None, Field(max_length=20)] = None,
) -> dict[str, Any]:
    if parent_worker_id is None:
        current = await turn_worker(call)
        parent_worker_id = current.id if current is not None else None
    spec = SpawnSpec(
        prompt=prompt,
        agent_id=agent_id,
        purpose=purpose,
        inherit_context=inherit_context,
        block_parent=block_parent,
        independent=independent,
        expected_artifacts=expected_artifacts or [],
    )
    child = await call.hub.workers.spawn(call.caller, parent_worker_id, spec)
    return worker_view(child)


@agent_tool(REPORT_RESULT)
async def report_result(
    call: ToolCall,
    summary: Annotated[str, Field(max_length=wk.PROMPT_MAX_CHARS, description="the result")],
    success: bool = True,
    error: Annotated[str | None, Field(max_length=4000, description="why it failed")] = None,
    artifacts: Annotated[
        list[str] | None, Field(max_length=50, description="files or ids produced")
    ] = None,
    worker_id: Annotated[str | None, Field(max_length=64)] = None,
) -> dict[str, Any]:
    if worker_id is None:
        current = await turn_worker(call)
        worker_id = current.id if current is not None else None
    spec = ResultSpec(summary=summary, success=success, error=error, artifacts=artifacts or [])
    return worker_view(await call.hub.workers.report_result(call.caller, worker_id, spec))


@agent_tool(CANCEL_WORKER)
async def cancel_worker(
    call: ToolCall,
    worker_id: Annotated[str, Field(max_length=64)],
    reason: Annotated[str, Field(min_length=1, max_length=200)] = "cancelled",
    propagate_to_children: bool = True,
    force: bool = False,
) -> dict[str, Any]:
    cancelled = await call.hub.workers.cancel(
        call.caller, worker_id, reason=reason, propagate=propagate_to_children, force=force
    )
    return {"cancelled": [brief_view(w) for w in cancelled], "count": len(cancelled)}


@agent_tool(TAKEOVER)
async def takeover(
    call: ToolCall,
    worker_id: Annotated[str, Field(max_length=64)],
    instruction: Annotated[str, Field(max_length=wk.INSTRUCTION_MAX_CHARS)],
    interrupt_first: bool = True,
    timeout_s: Annotated[float, Field(description="seconds to wait for the turn to end")] = 5.0,
) -> dict[str, Any]:
    outcome = await call.hub.workers.takeover(
        call.caller,
        worker_id,
        instruction,
        interrupt_first=interrupt_first,
        timeout_s=timeout_s,
    )
    return without_empty(
        {
            "worker": brief_view(outcome.worker),
            "message_id": outcome.message_id,
            "interrupted": outcome.interrupted,
            "timed_out": outcome.timed_out,
            "task_id": outcome.task_id,
        }
    )


@agent_tool(TOPOLOGY)
async def topology(
    call: ToolCall, session_id: Annotated[str | None, Field(max_length=64)] = None
) -> dict[str, Any]:
    if session_id is None:
        current = await turn_worker(call) or await callers_worker(call, call.caller.work_channel_id)
        if current is None:
            raise InvalidRequest(
                f"{call.caller.id!r} has no current worker; give 'session_id' (worker_status "
                "lists your workers and their sessions)",
                code="session_required",
            )
        session_id = current.session_id
    view = await call.hub.workers.topology(call.caller, session_id)
    session = view["session"]
    return {
        "session": without_empty(
            {
                "id": session["id"],
                "display_name": session["display_name"],
                "agent_id": session["agent_id"],
                "channel_id": session["channel_id"],
                "parent_logical_id": session.get("parent_logical_id"),
                "spawned_by_worker_id": session.get("spawned_by_worker_id"),
            }
        ),
        "workers": [brief_view(Worker.model_validate(w)) for w in view["workers"]],
        "tree": view["tree"],
        "child_sessions": [
            without_empty(
                {
                    "id": s["id"],
                    "display_name": s["display_name"],
                    "agent_id": s["agent_id"],
                    "spawned_by_worker_id": s.get("spawned_by_worker_id"),
                }
            )
            for s in view["child_sessions"]
        ],
        "messages": view["messages"],
    }


@agent_tool(WORKER_STATUS)
async def worker_status(
    call: ToolCall,
    worker_id: Annotated[str | None, Field(max_length=64)] = None,
    state: Annotated[list[wk.WorkerState] | None, Field(max_length=9)] = None,
) -> dict[str, Any]:
    hub = call.hub
    if worker_id is not None:
        return worker_view(await hub.workers.get(call.caller, worker_id))
    rows = await hub.workers.listing(call.caller, state=state or (), limit=LIST_LIMIT)
    return {"workers": [brief_view(w) for w in rows], "count": len(rows)}


@agent_tool(HEARTBEAT)
async def heartbeat(
    call: ToolCall,
    worker_id: Annotated[str | None, Field(max_length=64)] = None,
    long_running: bool | None = None,
) -> dict[str, Any]:
    hub, caller = call.hub, call.caller
    if worker_id is not None:
        beaten = [await hub.workers.heartbeat(caller, worker_id, long_running=long_running)]
    else:
        beaten = await hub.workers.heartbeat_all(caller, long_running=long_running)
    return {"workers": [brief_view(w) for w in beaten], "count": len(beaten)}


@agent_tool(READ_ARTIFACT)
async def read_artifact(
    call: ToolCall,
    artifact_id: Annotated[str, Field(max_length=64)],
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=100_000)] = ARTIFACT_READ_CHARS,
) -> dict[str, Any]:
    art = await call.hub.workers.artifact(call.caller, artifact_id)
    part = art.content[offset : offset + limit]
    end = offset + len(part)
    return without_empty(
        {
            "id": art.id,
            "worker_id": art.worker_id,
            "name": art.name,
            "content": part,
            "total_chars": len(art.content),
            "next_offset": end if end < len(art.content) else None,
        }
    )


TOOLS = (
    spawn_child,
    report_result,
    cancel_worker,
    takeover,
    topology,
    worker_status,
    heartbeat,
    read_artifact,
)
