"""The workers part of ``parley demo``: planner's worker hands work to two children.

The operator starts a worker for planner; planner spawns reviewer (blocking on it) and tester,
and tester spawns a child of its own. planner cancels tester's subtree, and the cancel reaches
the grandchild through its parent. The operator takes over reviewer's running turn: the turn is
interrupted and reviewer's next turn reads the takeover envelope; it finishes, its task-result
goes to planner, and planner wakes and reads it. The tree is printed at the end.

Every agent answers with its own scripted runtime, labelled as such. The children's first turns
are held open until a cancel or the takeover stops them, so the story plays the same way every
time. The scene calls the hub's worker service in-process, the calls ``parley worker …`` makes
over REST, and reads what it shows back from the hub.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import OPERATOR_ID, Principal
from parley.core.ports import Runtime
from parley.core.runtime import Turn, TurnResult
from parley.core.workers import Worker
from parley.demo.stage import STEP_TIMEOUT_S, VOICES, Hold, Stage, reached
from parley.service.workers.records import SpawnSpec, StartSpec, worker_topic
from parley.surfaces.cli.worker_view import session_names, state_text, worker_tree

if TYPE_CHECKING:
    from parley.service.hub import Hub

ROOT_NAME = "thursday-release"
ROOT_TASK = (
    "Prepare Thursday's release of the job queue: the handler guide needs its idempotency "
    "note and the burst test must run again with the flag off."
)
NOTE_TASK = "Write the idempotency note for the handler guide."
RERUN_TASK = "Rerun the burst test with the feature flag off."
BURST_TASK = "Generate the 10x burst of high-priority jobs for the rerun."
CANCEL_REASON = "no staging database until next week; we release without the rerun"
INSTRUCTION = (
    "Add an example to the note: a handler that records the job id before its side effect "
    "and skips a job whose id is already recorded."
)
SPLIT = (
    "Splitting the release work: reviewer writes the note for the handler guide, tester "
    "reruns the burst test with the flag off."
)
NOTE_DONE = (
    "Idempotency note written in the handler guide, with the example asked for: the handler "
    "records the job id before its side effect and skips a job whose id is recorded."
)
READ_RESULT = (
    "Read reviewer's task-result: the idempotency note is in the handler guide. The burst "
    "rerun was cancelled; Thursday's release goes ahead without it."
)

# (agent, what its turn's task contains, the step). The first match wins: a child's task text
# quotes its parent's recent work, so the more specific marker comes first.
STEPS: tuple[tuple[str, str, str], ...] = (
    ("planner", "[TASK RESULT]", "read_result"),
    ("planner", ROOT_TASK, "split"),
    ("reviewer", "[TAKEOVER]", "after_takeover"),
    ("reviewer", NOTE_TASK, "note"),
    ("tester", BURST_TASK, "burst"),
    ("tester", RERUN_TASK, "rerun"),
)
HELD = ("note", "rerun", "burst")
# Payload fields the event table leaves out: the rows say them already.
QUIET = frozenset({"agent_id", "session_id"})


@dataclass
class WorkersScript:
    """The scripted turns of the workers scene: the children's first turns are held open (only
    a cancel or the takeover ends them), and the texts the turns received are kept to show."""

    holds: dict[str, Hold] = field(default_factory=lambda: {step: Hold() for step in HELD})
    received: dict[str, str] = field(default_factory=dict)

    def step_of(self, agent: str, task: str) -> str | None:
        return next((s for a, marker, s in STEPS if a == agent and marker in task), None)

    async def play(self, agent: str, turn: Turn) -> str:
        step = self.step_of(agent, turn.prompt.task)
        assert step is not None
        self.received[step] = turn.prompt.task
        if step in self.holds:
            await self.holds[step].wait()
            return f"{agent} finished {step}."
        return {"split": SPLIT, "after_takeover": NOTE_DONE, "read_result": READ_RESULT}[step]


class WorkerVoice:
    """An agent's demo runtime: the workers scene's turns are played from ``WorkersScript``
    with the agent's own scripted model route; any other turn goes to ``inner``."""

    kind = "scripted"

    def __init__(self, agent: str, script: WorkersScript, inner: Runtime) -> None:
        self.agent = agent
        self.script = script
        self.inner = inner

        async def reply(turn: Turn) -> str:
            return await script.play(agent, turn)

        self._scene = ScriptedRuntime(reply)

    async def respond(self, turn: Turn) -> TurnResult:
        if self.script.step_of(self.agent, turn.prompt.task) is None:
            return await self.inner.respond(turn)
        result = await self._scene.respond(turn)
        return replace(result, model_route=VOICES[self.agent])

    async def aclose(self) -> None:
        await self.inner.aclose()


class WorkersScene:
    """The workers part of the demo, in-process on the demo's hub."""

    op: Principal

    def __init__(self, demo: Stage, hub: Hub, script: WorkersScript, console: Console) -> None:
        self.demo = demo
        self.hub = hub
        self.script = script
        self.console = console

    async def run(self) -> None:
        self.demo.step("8. Workers: a parent, two children, a cancelled subtree and a takeover")
        if self.demo.settings.openai_base_url:
            self.console.print(
                "The workers scene holds scripted turns open to show a cancel and a takeover; "
                "it runs with the scripted runtime only (unset PARLEY_OPENAI_BASE_URL to see it)."
            )
            return
        hub, holds = self.hub, self.script.holds
        self.op = await hub.identity.require(OPERATOR_ID)
        planner = await hub.identity.require("planner")
        tester = await hub.identity.require("tester")

        root = await hub.workers.start(
            self.op, StartSpec(agent_id="planner", prompt=ROOT_TASK, name=ROOT_NAME)
        )
        root = await self.until(root.id, lambda w: w.state == "idle", "planner's first turn")
        first_turn = root.task_id
        self.console.print(f"the operator started worker {root.id} for planner: {ROOT_TASK}")
        seen = await self.replies(root)

        note = await hub.workers.spawn(
            planner,
            root.id,
            SpawnSpec(prompt=NOTE_TASK, agent_id="reviewer", purpose="review", block_parent=True),
        )
        rerun = await hub.workers.spawn(
            planner, root.id, SpawnSpec(prompt=RERUN_TASK, agent_id="tester", purpose="verify")
        )
        burst = await hub.workers.spawn(tester, rerun.id, SpawnSpec(prompt=BURST_TASK))
        for step in HELD:
            await reached(holds[step].started, f"the {step} turn running")
        names = await self.names(root)
        for child, by, how in (
            (note, "planner", "blocking on it"),
            (rerun, "planner", "not blocking"),
            (burst, "tester", "from its own worker"),
        ):
            self.console.print(
                f"{by} spawned {child.id} for {child.agent_id} ({child.purpose}, {how}): "
                f"session {names.get(child.session_id)!r}"
            )

        cancelled = await hub.workers.cancel(planner, rerun.id, reason=CANCEL_REASON)
        self.console.print(f"planner cancels tester's rerun ({CANCEL_REASON}):")
        table = Table("cancelled", "agent", "session", "state", "cancel_propagated_from")
        for w in cancelled:
            table.add_row(
                w.id,
                w.agent_id,
                names.get(w.session_id, ""),
                state_text(w.state),
                w.cancel_propagated_from or "- (cancelled itself)",
            )
        self.console.print(table)

        outcome = await hub.workers.takeover(self.op, note.id, INSTRUCTION, timeout_s=30)
        self.console.print(
            f"the operator takes over reviewer's running turn: interrupted={outcome.interrupted}"
            f", timed out={outcome.timed_out}, takeover message {outcome.message_id}"
        )
        await self.until(note.id, lambda w: w.terminal, "reviewer's worker finished")
        root = await self.until(
            root.id,
            lambda w: w.state == "idle" and w.task_id != first_turn,
            "planner woken by the task-result",
        )
        await self.takeover_events(note)
        woke = self.script.received.get("read_result", "(planner's turn did not run)")
        self.console.print(
            Panel(
                Text(woke),
                title="planner woke (it blocked on reviewer); what its turn read",
                title_align="left",
            )
        )
        await self.replies(root, after=seen)

        tree = await hub.workers.tree(self.op, root.id)
        self.console.print(worker_tree(tree, title=f"the tree of {ROOT_NAME}", names=names))

    async def until(self, worker_id: str, done: Callable[[Worker], bool], what: str) -> Worker:
        """The worker once ``done`` holds, from its bus topic (subscribed before the first look,
        so a change between the look and the wait is not missed)."""
        sub = self.hub.bus.subscribe([worker_topic(worker_id)])
        try:
            async with asyncio.timeout(STEP_TIMEOUT_S):
                while True:
                    worker = await self.hub.workers.get(self.op, worker_id)
                    if done(worker):
                        return worker
                    await sub.get()
        except TimeoutError:
            raise RuntimeError(f"the workers scene did not reach {what!r}") from None
        finally:
            await sub.close()

    async def names(self, root: Worker) -> dict[str, str]:
        return session_names(await self.hub.workers.topology(self.op, root.session_id))

    async def replies(self, worker: Worker, *, after: int = 0) -> int:
        """Print the worker's replies in its channel after ``after`` (a sequence number), as
        the hub stored them with their scripted model route; return the last number seen."""
        messages: list[dict[str, Any]] = await self.demo.call(
            self.demo.op,
            "GET",
            f"/v1/channels/{worker.channel_id}/messages",
            params={"after_seq": after},
        )
        for m in messages:
            after = max(after, int(m["seq"]))
            if m["sender_kind"] != "agent":
                continue
            line = Text()
            line.append(m["sender_id"], style="bold cyan")
            line.append(f" ({(m.get('metadata') or {}).get('model_route')})", style="dim")
            line.append(f": {m['content']}")
            self.console.print(line)
        return after

    async def takeover_events(self, worker: Worker) -> None:
        """The takeover as the event log has it, and the envelope the worker's turn read."""
        events = await self.demo.call(
            self.demo.op,
            "GET",
            "/v1/events",
            params={"subject": f"worker:{worker.id}", "limit": 100},
        )
        table = Table("event on " + worker.id, "actor", "detail")
        for e in events:
            p = e["payload"]
            detail = (
                f"{p.get('from')} → {p.get('to')} ({p.get('reason')})"
                if "to" in p
                else ", ".join(f"{k}={v}" for k, v in p.items() if v and k not in QUIET)
            )
            style = "bold yellow" if e["type"].startswith("system.takeover") else ""
            table.add_row(Text(e["type"], style=style), e["actor"], Text(detail))
        self.console.print(table)
        envelope = self.script.received.get("after_takeover", "(reviewer's turn did not run)")
        self.console.print(
            Panel(Text(envelope), title="what reviewer's next turn received", title_align="left")
        )
