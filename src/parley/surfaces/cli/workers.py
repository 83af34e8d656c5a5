"""``parley worker …``: start workers, spawn children, cancel subtrees, take over a running
turn, resume and release, and look at the child tree and a session's topology, once or live."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table
from rich.text import Text

from parley.surfaces.cli.client import TIMEOUT_S, HubClient
from parley.surfaces.cli.output import (
    JsonFlag,
    client,
    console,
    ctrl_c_stops_watching,
    emit,
    fields,
    print_json_line,
    state,
    table,
    wants_json,
    when,
    when_short,
)
from parley.surfaces.cli.worker_view import (
    TERMINAL_STATES,
    nest,
    session_names,
    state_text,
    tree_states,
    worker_label,
    worker_table,
    worker_tree,
)

worker_app = typer.Typer(
    help="Workers: child tasks, cancel trees, takeover of a running turn, the worker tree.",
    no_args_is_help=True,
)

WorkerId = Annotated[str, typer.Argument(metavar="WORKER_ID")]
SessionId = Annotated[str, typer.Argument(metavar="SESSION_ID")]
Prompt = Annotated[
    str, typer.Argument(metavar="PROMPT", help="The task, as the worker's first turn reads it.")
]
LongRunning = Annotated[
    bool,
    typer.Option("--long-running", help="Never call it stale while it is silent (a long job)."),
]


# -- rendering -------------------------------------------------------------------------------------
def render_worker(w: dict[str, Any]) -> None:
    console.print(worker_label(w))
    result = w.get("result") or {}
    fields(
        "",
        [
            ("agent", w.get("agent_id")),
            ("session", w.get("session_id")),
            ("channel", w.get("channel_id")),
            ("purpose", w.get("purpose")),
            ("parent", w.get("parent_worker_id")),
            ("children", w.get("children_worker_ids")),
            ("independent", "yes" if w.get("independent") else None),
            ("blocks its parent", "yes" if w.get("block_parent") else None),
            ("long-running", "yes" if w.get("long_running") else None),
            ("blocked on", w.get("blocked_on_message_id")),
            ("takeover pending", w.get("pending_takeover_message_id")),
            ("cancelled through", w.get("cancel_propagated_from")),
            ("trace", w.get("trace_id")),
            ("turn", w.get("task_id")),
            ("created by", w.get("created_by")),
            ("created", when(w.get("created")) or None),
            ("last heartbeat", when(w.get("last_heartbeat")) or None),
            ("ended", when(w.get("ended")) or None),
            ("end reason", w.get("end_reason")),
            ("result", _result_line(result) if result else None),
            ("summary", result.get("summary")),
            ("artifacts", result.get("artifacts")),
            ("summary artifact", result.get("artifact_id")),
            ("error", result.get("error")),
        ],
    )


def _result_line(result: dict[str, Any]) -> str:
    outcome = "succeeded" if result.get("success") else "failed"
    return f"{outcome} ({result.get('summary_tokens', 0)} tokens of summary)"


def render_workers(title: str, rows: list[dict[str, Any]]) -> None:
    shown = worker_table(title, rows, when=when_short)
    if shown is None:
        console.print(f"[dim]{title}: none[/dim]")
    else:
        console.print(shown)


def render_cancelled(body: dict[str, Any]) -> None:
    rows = body.get("cancelled") or []
    shown = Table(title=f"cancelled {len(rows)} worker(s)", title_justify="left")
    shown.add_column("id", no_wrap=True)
    shown.add_column("agent")
    shown.add_column("state")
    shown.add_column("cancel_propagated_from", no_wrap=True)
    for w in rows:
        source = w.get("cancel_propagated_from")
        shown.add_row(
            w["id"],
            Text(str(w.get("agent_id"))),
            state_text(w.get("state")),
            Text(source or "- (the worker cancelled)"),
        )
    console.print(shown)


def render_takeover(outcome: dict[str, Any]) -> None:
    worker = outcome.get("worker") or {}
    console.print(worker_label(worker))
    fields(
        f"takeover of {worker.get('id')}",
        [
            ("takeover message", outcome.get("message_id")),
            ("running turn interrupted", "yes" if outcome.get("interrupted") else "no"),
            ("waiting for it to stop timed out", "yes" if outcome.get("timed_out") else "no"),
            ("waited", f"{outcome.get('waited_ms', 0):.0f} ms"),
            ("turn with the envelope", outcome.get("task_id")),
        ],
    )
    console.print(
        Text(
            "Its next turn reads the takeover envelope with your instruction; until that turn "
            "ends the worker is not called stale.",
            style="dim",
        )
    )


def render_tree(nodes: list[dict[str, Any]], worker_id: str) -> None:
    if not nodes:
        console.print("[dim]no workers[/dim]")
        return
    console.print(worker_tree(nodes, title=f"worker tree of {worker_id}", focus=worker_id))


def render_topology(t: dict[str, Any]) -> None:
    session = t.get("session") or {}
    fields(
        f"session {session.get('id')}",
        [
            ("name", session.get("display_name")),
            ("agent", session.get("agent_id")),
            ("channel", session.get("channel_id")),
            ("parent session", session.get("parent_logical_id")),
            ("spawned by worker", session.get("spawned_by_worker_id")),
            ("spawn purpose", session.get("spawn_purpose")),
            ("created", when(session.get("created")) or None),
        ],
    )
    render_workers("workers of this session", t.get("workers") or [])
    names = session_names(t)
    # Mail is addressed to ``session:<id>``: show the session's name instead.
    names_to = {f"session:{k}": v for k, v in names.items()}
    tree = t.get("tree") or []
    if tree:
        console.print(worker_tree(tree, title="the child tree", names=names))
    table(
        "child sessions",
        ["id", "name", "agent", "spawned by worker", "purpose"],
        [
            (
                s["id"],
                s.get("display_name"),
                s.get("agent_id"),
                s.get("spawned_by_worker_id"),
                s.get("spawn_purpose"),
            )
            for s in t.get("child_sessions") or []
        ],
    )
    table(
        "mail to these sessions",
        ["id", "kind", "from", "to", "subject", "status", "created"],
        [
            (
                m["id"],
                m.get("kind"),
                m.get("from_id"),
                names_to.get(str(m.get("to")), m.get("to")),
                m.get("subject"),
                m.get("status"),
                when_short(m.get("created")),
            )
            for m in t.get("messages") or []
        ],
    )


# -- commands --------------------------------------------------------------------------------------
@worker_app.command("list")
def list_workers(
    ctx: typer.Context,
    state_: Annotated[
        list[str] | None,
        typer.Option("--state", help="Only workers in this state (repeatable)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 200,
    as_json: JsonFlag = False,
) -> None:
    """Workers you may see, newest first.

    The operator sees all; an agent its own, those it started or spawned, and those below."""
    rows = client(ctx).get("/v1/workers", state=state_ or None, limit=limit)
    emit(ctx, as_json, rows, lambda ws: render_workers("workers", ws))


@worker_app.command("show")
def show(ctx: typer.Context, worker_id: WorkerId, as_json: JsonFlag = False) -> None:
    """One worker: its state, its place in the tree, its turn and its result."""
    emit(ctx, as_json, client(ctx).get(f"/v1/workers/{worker_id}"), render_worker)


@worker_app.command("start")
def start(
    ctx: typer.Context,
    prompt: Prompt,
    agent: Annotated[
        str | None,
        typer.Option(help="The agent that runs it (an agent starting one may omit it)."),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The session's name (default: from the agent and prompt).")
    ] = None,
    long_running: LongRunning = False,
    as_json: JsonFlag = False,
) -> None:
    """Start a root worker: a new session of the agent, its first turn reading PROMPT."""
    body: dict[str, Any] = {"prompt": prompt, "long_running": long_running}
    if agent is not None:
        body["agent_id"] = agent
    if name is not None:
        body["name"] = name
    emit(ctx, as_json, client(ctx).post("/v1/workers", body), render_worker)


@worker_app.command("spawn")
def spawn(
    ctx: typer.Context,
    parent_id: Annotated[str, typer.Argument(metavar="PARENT_WORKER_ID")],
    prompt: Prompt,
    agent: Annotated[
        str | None,
        typer.Option(help="The agent that runs the child (default: the parent's agent)."),
    ] = None,
    purpose: Annotated[
        str, typer.Option(help="task-dispatch, research, verify, review, …")
    ] = "task-dispatch",
    block_parent: Annotated[
        bool, typer.Option("--block-parent", help="The child's result wakes the parent.")
    ] = False,
    independent: Annotated[
        bool,
        typer.Option("--independent", help="Cancelling the parent does not stop this child."),
    ] = False,
    inherit_context: Annotated[
        bool, typer.Option(help="Quote the parent's recent work in the child's task.")
    ] = True,
    expect: Annotated[
        list[str] | None, typer.Option("--expect", help="An expected artifact (repeatable).")
    ] = None,
    long_running: LongRunning = False,
    as_json: JsonFlag = False,
) -> None:
    """Spawn a child worker of PARENT_WORKER_ID.

    The child gets a session '<parent> / <slug of prompt>', a task-dispatch mail and its first
    turn; its result comes back to the parent's session as a task-result."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "purpose": purpose,
        "block_parent": block_parent,
        "independent": independent,
        "inherit_context": inherit_context,
        "expected_artifacts": expect or [],
        "long_running": long_running,
    }
    if agent is not None:
        body["agent_id"] = agent
    emit(ctx, as_json, client(ctx).post(f"/v1/workers/{parent_id}/spawn", body), render_worker)


@worker_app.command("cancel")
def cancel(
    ctx: typer.Context,
    worker_id: WorkerId,
    reason: Annotated[str, typer.Option(help="Why; the parent's task-result says it.")] = (
        "cancelled"
    ),
    propagate: Annotated[
        bool, typer.Option(help="Cancel its children too (never independent ones).")
    ] = True,
    force: Annotated[
        bool, typer.Option("--force", help="Do not wait for a runtime's own stop.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Cancel a worker and its subtree, except independent children.

    Lists the workers cancelled and whose cancel reached each (cancel_propagated_from)."""
    body = {"reason": reason, "propagate_to_children": propagate, "force": force}
    emit(ctx, as_json, client(ctx).post(f"/v1/workers/{worker_id}/cancel", body), render_cancelled)


@worker_app.command("takeover")
def takeover(
    ctx: typer.Context,
    worker_id: WorkerId,
    instruction: Annotated[str, typer.Argument(help="What the worker must do now.")],
    interrupt: Annotated[
        bool, typer.Option(help="Interrupt the running turn (else let it finish first).")
    ] = True,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the running turn to stop (0-120).")
    ] = 5.0,
    as_json: JsonFlag = False,
) -> None:
    """Take over a worker: interrupt its running turn and give it INSTRUCTION.

    Waits for the turn to stop (at most --timeout), then starts the worker's next turn with an
    envelope that says plainly it is a takeover of an interrupted turn."""
    # The hub answers once the turn has stopped or the timeout passed: wait longer than that.
    hub = HubClient(state(ctx).config(), timeout=TIMEOUT_S + max(0.0, timeout))
    ctx.call_on_close(hub.close)
    body = {"instruction": instruction, "interrupt_first": interrupt, "timeout_s": timeout}
    emit(ctx, as_json, hub.post(f"/v1/workers/{worker_id}/takeover", body), render_takeover)


@worker_app.command("resume")
def resume(
    ctx: typer.Context,
    worker_id: WorkerId,
    note: Annotated[str, typer.Option(help="A note the resumed turn reads.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Resume an interrupted, stale or idle worker.

    Its next turn says it was interrupted, with the session's pending mail in front."""
    body = {"note": note} if note else {}
    emit(ctx, as_json, client(ctx).post(f"/v1/workers/{worker_id}/resume", body), render_worker)


@worker_app.command("release")
def release(ctx: typer.Context, worker_id: WorkerId, as_json: JsonFlag = False) -> None:
    """Let an idle or stale worker go for good."""
    emit(ctx, as_json, client(ctx).post(f"/v1/workers/{worker_id}/release"), render_worker)


@worker_app.command("tree")
def tree(ctx: typer.Context, worker_id: WorkerId, as_json: JsonFlag = False) -> None:
    """The worker's whole tree (every worker of its trace), with each state in colour."""
    hub = client(ctx)
    # The tree marks the worker by its full id: the start of one is looked up first.
    worker_id = hub.worker_id(worker_id) or worker_id
    nodes = hub.get(f"/v1/workers/{worker_id}/tree")
    emit(ctx, as_json, nodes, lambda ns: render_tree(ns, worker_id))


@worker_app.command("topology")
def topology(ctx: typer.Context, session_id: SessionId, as_json: JsonFlag = False) -> None:
    """A session's workers, their child tree, the child sessions and their mail."""
    emit(ctx, as_json, client(ctx).get(f"/v1/sessions/{session_id}/topology"), render_topology)


@worker_app.command("watch")
def watch(ctx: typer.Context, worker_id: WorkerId, as_json: JsonFlag = False) -> None:
    """Watch a worker and its descendants live until the worker ends.

    Each change is one line and the tree is drawn again; with --json, the stream's events as
    JSON lines. Ctrl+C stops watching (the workers go on)."""
    with ctrl_c_stops_watching():
        follow_tree(client(ctx), worker_id, machine=wants_json(ctx, as_json))


class TreeScreen:
    """Keeps the watched workers from the stream and shows what changed: a line per change
    and the tree (redrawn in place on a terminal, printed again otherwise)."""

    def __init__(self, worker_id: str, *, machine: bool) -> None:
        self.worker_id = worker_id
        self.machine = machine
        self.workers: dict[str, dict[str, Any]] = {}
        self.shown: tuple[Any, ...] | None = None
        self.live: Live | None = None

    @property
    def ended(self) -> bool:
        root = self.workers.get(self.worker_id)
        return root is not None and root.get("state") in TERMINAL_STATES

    def event(self, name: str, data: dict[str, Any]) -> None:
        if self.machine:
            print_json_line({"event": name, "data": data})
        if name == "tree":
            # The whole subtree as it is now (on each connection): start from it.
            self.workers = {str(w["id"]): w for w in data.get("workers") or []}
        elif name == "worker":
            before = self.workers.get(str(data["id"]))
            self.workers[str(data["id"])] = data
            if not self.machine:
                self.note(before, data)
        self.draw()

    def note(self, before: dict[str, Any] | None, after: dict[str, Any]) -> None:
        line = Text(f"{after['id']} ({after.get('agent_id')}) ")
        if before is None:
            line.append("spawned, ")
        elif before.get("state") == after.get("state"):
            return  # a heartbeat or a new turn: the tree says nothing new
        else:
            line.append_text(state_text(before.get("state")))
            line.append(" → ")
        line.append_text(state_text(after.get("state")))
        if after.get("end_reason") and after.get("state") in TERMINAL_STATES:
            line.append(f" ({after['end_reason']})", style="dim")
        self._print(line)

    def draw(self) -> None:
        nodes = nest(list(self.workers.values()))
        seen = tree_states(nodes)
        if self.machine or seen == self.shown:
            return
        self.shown = seen
        drawn = worker_tree(nodes, title=f"watching {self.worker_id}", focus=self.worker_id)
        if self.live is not None:
            self.live.update(drawn, refresh=True)
        else:
            console.print(drawn)

    def _print(self, text: Text) -> None:
        (self.live.console if self.live is not None else console).print(text)

    def start(self) -> None:
        if not self.machine and console.is_terminal:
            self.live = Live(console=console, auto_refresh=False)
            self.live.start()

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def follow_tree(hub: HubClient, worker_id: str, *, machine: bool) -> dict[str, dict[str, Any]]:
    """Show a worker and its descendants from the worker's SSE stream until the worker ends
    (or the stream does, once all of them ended); return the workers as last seen."""
    # The stream's workers are keyed by their full ids: the start of one is looked up first.
    worker_id = hub.worker_id(worker_id) or worker_id
    screen = TreeScreen(worker_id, machine=machine)
    screen.start()
    try:
        for event in hub.stream(f"/v1/workers/{worker_id}/stream"):
            if event.event not in ("tree", "worker"):
                continue
            screen.event(event.event, event.json())
            if screen.ended:
                break
    finally:
        screen.stop()
    if not machine and screen.ended:
        state_now = str(screen.workers[worker_id].get("state"))
        console.print(Text.assemble(f"{worker_id} ended: ", state_text(state_now)))
    return screen.workers
