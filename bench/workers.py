"""Worker spawn, cancel of a tree and takeover of a CLI turn (SPEC W3–W5, §7).

Three measurements on one hub in this process (a temporary data root; on PostgreSQL a
throwaway database):

* ``spawn_*``: from the call that spawns a child to the moment the hub enters the child's
  runtime ``respond()`` for its first turn (the spawn's one commit: child session and work
  channel, ``task-dispatch`` mail, both sides of the relation, the trigger and the task; then
  the turn's start: its reads and prompt). A wrapper around a zero-latency scripted runtime
  notes when each turn enters it. The hub is idle before each spawn.
* ``cancel_tree_100_*``: a tree of 100 workers (a root and 99 descendants, three children per
  worker) whose turns all run, each held in its runtime until it is stopped; from the cancel
  call to its return, when every worker is KILLED and every turn has ended (checked after).
  ``cancel_tree_100_killed_ms`` stops the clock earlier: when the last KILLED state reaches a
  subscriber of the hub's live ``workers`` topic (the turns may still be unwinding).
* ``orphans_after_hub_kill``: a hub in a process of its own (same backend) runs 3 fake Claude
  Code and 3 fake Codex workers mid-turn, each CLI with a tool started in a session of its own
  (as Claude Code runs Bash); the hub is killed with SIGKILL and restarted on the same store;
  the figure is how many of those processes (supervisors, CLIs, tools) are still running 10 s
  after the kill (must be 0). ``orphans_gone_ms``: from the kill until none runs (the
  supervisors end their trees on their own, without waiting for the restart).
* ``takeover_*``: a root worker whose agent is the fake Claude Code (``tests/fakes/
  fake_claude.py`` in ``slow`` mode, kept alive per session, stream-json), caught mid-turn;
  from the takeover call to the moment the injected turn enters the runtime, minus the CLI's
  own time to stop the interrupted turn (``interrupt_ms`` in the cancelled turn's failure
  details: interrupt frame sent → its result read), which is reported on its own as
  ``cli_interrupt_*``.
* ``mail_to_live_turn_*``: a root worker whose agent is the fake Claude Code in ``slow`` mode,
  holding one turn open; from the call that sends mail to the worker's session to the moment
  the running fake reports that it read the mail as a user message of that turn (the hub
  claims it, pushes it into the CLI's stdin and the CLI takes it). Also given as
  ``mail_to_live_turn_ms_p50`` and ``mail_to_live_turn_ms_p99``.

A table goes to stdout, progress to stderr; the last line of stdout is one JSON object with
every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from common import (
    backend_table,
    chosen_backends,
    compare_backends,
    distribution,
    ms,
    parse_args,
    run_main,
)
from hub_server import HubProcess, percentile, progress, temp_postgres
from parley.adapters.runtimes.command import CommandRuntime
from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.errors import RuntimeFailure
from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.core.ports import Runtime, Subscription
from parley.core.runtime import Turn, TurnResult
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.workers.records import WORKERS_TOPIC, SpawnSpec, StartSpec
from parley.testing import StaticRuntimes

if TYPE_CHECKING:
    from tests.fakes.ready import ReadyListener

REPO = Path(__file__).resolve().parents[1]
FAKE_CLAUDE = REPO / "tests" / "fakes" / "fake_claude.py"
FAKE_CODEX = REPO / "tests" / "fakes" / "fake_codex.py"
ORPHAN_WORKERS = 3
"""Fake Claude Code workers, and as many fake Codex ones, running when the hub is killed."""
ORPHAN_WAIT_S = 10.0
TREE_SIZE = 100
TREE_BRANCHING = 3
CHILDREN_PER_PARENT = 20
WAIT_S = 30.0


@dataclass(frozen=True)
class Plan:
    backends: tuple[str, ...]
    quick: bool
    spawns: int
    trees: int
    takeovers: int
    mails: int


def make_plan(args: argparse.Namespace) -> Plan:
    quick = bool(args.quick)
    return Plan(
        backends=chosen_backends(args.backend),
        quick=quick,
        spawns=args.spawns or (100 if quick else 1000),
        trees=args.trees or (3 if quick else 10),
        takeovers=args.takeovers or (30 if quick else 200),
        mails=args.mails or (30 if quick else 200),
    )


class Entries:
    """When turns entered a runtime, by task and by channel, with a way to wait for one."""

    def __init__(self) -> None:
        self.by_task: dict[str, float] = {}
        self.by_channel: dict[str, float] = {}
        self.interrupt_ms: dict[str, float] = {}
        self._changed = asyncio.Event()

    def note(self, turn: Turn) -> None:
        now = time.perf_counter()
        if turn.task_id is not None:
            self.by_task.setdefault(turn.task_id, now)
        self.by_channel.setdefault(turn.channel_id, now)
        self._changed.set()

    async def task_entered(self, task_id: str) -> float:
        async with asyncio.timeout(WAIT_S):
            while task_id not in self.by_task:
                self._changed.clear()
                await self._changed.wait()
        return self.by_task[task_id]

    async def count_reached(self, count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(self.by_task) < count:
                self._changed.clear()
                await self._changed.wait()


class EntryTimedRuntime:
    """Wraps a runtime to note when each turn enters it, and the CLI's interrupt time of a
    turn that was cancelled (from its failure's details)."""

    def __init__(self, inner: Runtime, entries: Entries) -> None:
        self.inner = inner
        self.entries = entries
        self.kind = inner.kind

    async def respond(self, turn: Turn) -> TurnResult:
        self.entries.note(turn)
        try:
            return await self.inner.respond(turn)
        except RuntimeFailure as failure:
            interrupt_ms = failure.details.get("interrupt_ms")
            if turn.task_id is not None and isinstance(interrupt_ms, int | float):
                self.entries.interrupt_ms[turn.task_id] = float(interrupt_ms)
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _agent(hub: Hub, operator: Principal, agent_id: str, runtime: dict[str, Any]) -> None:
    await hub.identity.create_agent(operator, AgentSpec(id=agent_id, runtime=runtime))


# -- 1. spawn → the child's first turn ------------------------------------------------------------
async def bench_spawn(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    entries = Entries()
    await _agent(hub, operator, "lead", {"kind": "scripted"})
    runtimes.set("lead", EntryTimedRuntime(ScriptedRuntime(lambda _turn: "done"), entries))
    progress(f"spawn: {plan.spawns} children, {CHILDREN_PER_PARENT} per root worker")
    to_turn: list[float] = []
    call: list[float] = []
    root_id = ""
    for i in range(plan.spawns + 1):  # the first one warms up
        if i % CHILDREN_PER_PARENT == 0:
            root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="plan"))
            root_id = root.id
            await hub.tasks.wait_idle()
        began = time.perf_counter()
        child = await hub.workers.spawn(
            operator, root_id, SpawnSpec(prompt=f"Check part {i} of the parser")
        )
        returned = time.perf_counter()
        assert child.task_id is not None
        entered = await entries.task_entered(child.task_id)
        # A child's result wakes its parent: let that settle before the next sample.
        await hub.tasks.wait_idle()
        if i:
            to_turn.append((entered - began) * 1000)
            call.append((returned - began) * 1000)
    figures = {**distribution("spawn", to_turn), **distribution("spawn_call", call)}
    figures["spawns"] = len(to_turn)
    progress(f"spawn: p50 {figures['spawn_p50_ms']} ms, p99 {figures['spawn_p99_ms']} ms")
    return figures


# -- 2. cancel of a tree of 100 running workers ---------------------------------------------------
async def _all_killed(subscription: Subscription, ids: set[str]) -> float:
    """When the last of ``ids`` was seen KILLED on the hub's live worker topic."""
    killed: set[str] = set()
    while killed != ids:
        data = await subscription.get()
        found = data.get("worker") or {}
        if found.get("state") == "killed" and found.get("id") in ids:
            killed.add(found["id"])
    return time.perf_counter()


async def bench_cancel(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    entries = Entries()
    await _agent(hub, operator, "crew", {"kind": "scripted"})

    async def held(_turn: Turn) -> str:
        # Runs until its turn is stopped: the runtime's race cancels this call.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    runtimes.set("crew", EntryTimedRuntime(ScriptedRuntime(held), entries))
    progress(f"cancel: {plan.trees} trees of {TREE_SIZE} running workers")
    samples: list[float] = []
    seen_killed: list[float] = []
    for _ in range(plan.trees):
        entries.by_task.clear()
        root = await hub.workers.start(operator, StartSpec(agent_id="crew", prompt="root"))
        ids = [root.id]
        for n in range(1, TREE_SIZE):
            parent = ids[(n - 1) // TREE_BRANCHING]
            child = await hub.workers.spawn(
                operator, parent, SpawnSpec(prompt=f"part {n}", inherit_context=False)
            )
            ids.append(child.id)
        await entries.count_reached(TREE_SIZE)  # every turn is in its runtime
        subscription = hub.bus.subscribe([WORKERS_TOPIC])
        watcher = asyncio.create_task(_all_killed(subscription, set(ids)))
        began = time.perf_counter()
        cancelled = await hub.workers.cancel(operator, root.id, reason="bench")
        samples.append((time.perf_counter() - began) * 1000)
        seen_killed.append((await asyncio.wait_for(watcher, WAIT_S) - began) * 1000)
        await subscription.close()
        assert sorted(w.id for w in cancelled) == sorted(ids), "the cancel missed workers"
        async with hub.store.read() as tx:
            w = tx.table("workers").c
            rows = await tx.select("workers", w.trace_id == root.trace_id)
        assert len(rows) == TREE_SIZE and {r.state for r in rows} == {"killed"}
        assert not hub.tasks.live, "a cancelled turn is still running"
        await hub.tasks.wait_idle()
    ordered = sorted(samples)
    figures = {
        "cancel_tree_100_ms": ms(percentile(ordered, 50)),
        "cancel_tree_100_max_ms": ms(ordered[-1]),
        "cancel_tree_100_killed_ms": ms(percentile(sorted(seen_killed), 50)),
        "cancel_trees": len(samples),
    }
    progress(
        f"cancel: median {figures['cancel_tree_100_ms']} ms, "
        f"max {figures['cancel_tree_100_max_ms']} ms"
    )
    return figures


# -- 3. takeover of a CLI turn mid-stream ---------------------------------------------------------
def fake_cli_reports() -> ReadyListener:
    """The loopback listener the fake Claude Code reports to (``turn <pid> <n> <session>``,
    ``interrupted <id>``) and reads ``go`` from, to finish a turn it holds."""
    # The listener is the tests' own: bench/ already runs the fake CLI from tests/fakes.
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from tests.fakes.ready import ReadyListener

    return ReadyListener()


async def next_report(reports: ReadyListener, prefix: str) -> list[str]:
    """The next report that starts with ``prefix``, split into words."""
    async with asyncio.timeout(WAIT_S):
        while True:
            words = (await reports.lines.get()).split()
            if words and words[0] == prefix:
                return words


async def bench_takeover(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    entries = Entries()
    async with fake_cli_reports() as reports:
        config = {
            "kind": "command",
            "protocol": "claude-stream-json",
            "argv": [sys.executable, str(FAKE_CLAUDE), "slow"],
            "env": {"FAKE_READY_PORT": str(reports.port)},
        }
        await _agent(hub, operator, "coder", config)
        cli = CommandRuntime.from_config(config)
        runtimes.set("coder", EntryTimedRuntime(cli, entries))
        progress(f"takeover: {plan.takeovers} takeovers of a fake Claude Code turn mid-stream")
        worker = await hub.workers.start(
            operator, StartSpec(agent_id="coder", prompt="Refactor the parser")
        )
        hub_side: list[float] = []
        with_cli: list[float] = []
        interrupts: list[float] = []
        pids: set[str] = set()
        for i in range(plan.takeovers + 1):  # the first one warms up
            if i:
                await hub.workers.resume(operator, worker.id, note=f"round {i}")
            _, pid, _, _ = await next_report(reports, "turn")  # mid-stream: it waits in the turn
            pids.add(pid)
            cut = (await hub.workers.get(operator, worker.id)).task_id
            assert cut is not None
            began = time.perf_counter()
            outcome = await hub.workers.takeover(
                operator, worker.id, "Keep the public API.", timeout_s=WAIT_S
            )
            assert outcome.interrupted and not outcome.timed_out and outcome.task_id
            entered = await entries.task_entered(outcome.task_id)
            await next_report(reports, "turn")  # the same process took the envelope
            await reports.tell("go")
            await hub.tasks.wait_idle()
            interrupt_ms = entries.interrupt_ms[cut]
            if i:
                total = (entered - began) * 1000
                with_cli.append(total)
                hub_side.append(total - interrupt_ms)
                interrupts.append(interrupt_ms)
        after = await hub.workers.get(operator, worker.id)
        assert after.state == "idle" and after.pending_takeover_message_id is None
    figures = {
        **distribution("takeover", hub_side),
        **distribution("takeover_with_cli", with_cli),
        **distribution("cli_interrupt", interrupts),
        "takeovers": len(hub_side),
        "takeover_cli_processes": len(pids),
    }
    progress(
        f"takeover: p50 {figures['takeover_p50_ms']} ms, p99 {figures['takeover_p99_ms']} ms "
        f"(CLI interrupt p50 {figures['cli_interrupt_p50_ms']} ms)"
    )
    return figures


# -- 4. mail pushed into a live CLI turn ---------------------------------------------------------
async def bench_live_mail(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    async with fake_cli_reports() as reports:
        config = {
            "kind": "command",
            "protocol": "claude-stream-json",
            # As the claude-code preset runs Claude Code: pushed messages are echoed.
            "argv": [sys.executable, str(FAKE_CLAUDE), "slow", "--replay-user-messages"],
            "env": {"FAKE_READY_PORT": str(reports.port)},
        }
        await _agent(hub, operator, "mailee", config)
        runtimes.set("mailee", CommandRuntime.from_config(config))
        progress(f"live mail: {plan.mails} messages into one running fake Claude Code turn")
        worker = await hub.workers.start(
            operator, StartSpec(agent_id="mailee", prompt="Keep working on the parser")
        )
        await next_report(reports, "turn")  # the turn runs, and waits for "go"
        seen: list[float] = []
        for i in range(plan.mails + 1):  # the first one warms up
            began = time.perf_counter()
            await hub.mail.send(
                operator,
                SendRequest(
                    to=f"session:{worker.session_id}",
                    kind="info",
                    subject=f"note {i}",
                    body="Keep the public API.",
                ),
            )
            await next_report(reports, "mail")
            if i:
                seen.append((time.perf_counter() - began) * 1000)
        await reports.tell("go")
        await hub.tasks.wait_idle()
        after = await hub.workers.get(operator, worker.id)
        assert after.state == "idle", after.state
    figures = {**distribution("mail_to_live_turn", seen), "live_mails": len(seen)}
    # The names the worker issue gives these figures.
    figures["mail_to_live_turn_ms_p50"] = figures["mail_to_live_turn_p50_ms"]
    figures["mail_to_live_turn_ms_p99"] = figures["mail_to_live_turn_p99_ms"]
    progress(
        f"live mail: p50 {figures['mail_to_live_turn_p50_ms']} ms, "
        f"p99 {figures['mail_to_live_turn_p99_ms']} ms"
    )
    return figures


# -- 4. kill -9 of a hub with CLI workers running -------------------------------------------------
def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def _survivors(pids: set[int], deadline: float) -> tuple[list[int], float]:
    """Which of ``pids`` still run when all have gone or at ``deadline``, and when that was."""
    while (alive := [p for p in pids if _running(p)]) and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    return alive, time.perf_counter()


async def bench_orphans(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    progress(f"orphans: kill -9 of a hub running {2 * ORPHAN_WORKERS} fake CLI workers")
    scratch = Path(tempfile.mkdtemp(prefix="parley-bench-orphans-"))
    try:
        if hub.store.dialect == "postgresql":
            async with temp_postgres("parley_bench_orph_") as url:
                return await _orphans(scratch, url)
        return await _orphans(scratch, None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _orphans(scratch: Path, database_url: str | None) -> dict[str, Any]:
    tool_pids = scratch / "tool-pids"
    codex = scratch / "codex-fake"
    codex.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CODEX}" "$@"\n')
    codex.chmod(0o755)
    first = HubProcess(scratch / "home", database_url)
    second = HubProcess(scratch / "home", database_url, first.port)
    async with fake_cli_reports() as reports:
        common = {"FAKE_READY_PORT": str(reports.port), "FAKE_TOOL_PIDS": str(tool_pids)}
        agents = {
            "claude-agent": {
                "kind": "command",
                "protocol": "claude-stream-json",
                "argv": [sys.executable, str(FAKE_CLAUDE), "slow"],
                "env": common,
            },
            "codex-agent": {
                "kind": "command",
                "preset": "codex",
                "executable": str(codex),
                "env": {**common, "FAKE_CODEX_MODE": "hang", "FAKE_CODEX_LOGGED_IN": "1"},
            },
        }
        try:
            await first.start()
            headers = {"Authorization": f"Bearer {first.operator_token}"}
            async with httpx.AsyncClient(base_url=first.url, headers=headers) as op:
                for agent_id, runtime in agents.items():
                    r = await op.post("/v1/agents", json={"id": agent_id, "runtime": runtime})
                    assert r.status_code == 201, r.text
                    for i in range(ORPHAN_WORKERS):
                        body = {"agent_id": agent_id, "prompt": f"Port part {i}"}
                        r = await op.post("/v1/workers", json=body)
                        assert r.status_code == 201, r.text
            clis = [int((await next_report(reports, "turn"))[1]) for _ in range(2 * ORPHAN_WORKERS)]
            tools = [int(line.split()[1]) for line in tool_pids.read_text().splitlines()]
            pids = {*clis, *tools, *(_parent(pid) for pid in clis)}
            assert first.proc is not None
            first.proc.kill()
            killed = time.perf_counter()
            first.proc.wait()
            survivors = asyncio.create_task(_survivors(pids, killed + ORPHAN_WAIT_S))
            await second.start()  # the restarted hub ends what a dead hub's records name
            alive, gone_at = await survivors
            gone_ms = None if alive else (gone_at - killed) * 1000
        finally:
            first.stop()
            second.stop()
    progress(f"orphans: {len(alive)} of {len(pids)} processes left after the kill")
    return {
        "orphans_after_hub_kill": len(alive),
        "orphans_processes": len(pids),
        "orphans_gone_ms": ms(gone_ms),
    }


# -- driver ---------------------------------------------------------------------------------------
HEADLINES = (
    "spawn_p50_ms",
    "spawn_p99_ms",
    "cancel_tree_100_ms",
    "takeover_p50_ms",
    "takeover_p99_ms",
    "cli_interrupt_p50_ms",
    "mail_to_live_turn_p50_ms",
    "mail_to_live_turn_p99_ms",
    "orphans_after_hub_kill",
)
TARGETS = {"spawn_p99_ms": 50.0, "cancel_tree_100_ms": 500.0, "takeover_p99_ms": 200.0}


async def run(plan: Plan) -> dict[str, Any]:
    return await compare_backends(
        plan,
        (bench_spawn, bench_cancel, bench_takeover, bench_live_mail, bench_orphans),
        (*HEADLINES, "mail_to_live_turn_ms_p50", "mail_to_live_turn_ms_p99"),
        per_backend=[h for h in HEADLINES if h.endswith("_ms")],
        targets=TARGETS,
        home_prefix="parley-bench-workers-",
        database_prefix="parley_bench_work_",
    )


def table(result: dict[str, Any]) -> str:
    """The figures as a readable table, one column per backend."""
    rows: list[tuple[str, str]] = [
        ("spawns measured", "spawns"),
        ("spawn -> 1st turn p50 ms", "spawn_p50_ms"),
        ("spawn -> 1st turn p90 ms", "spawn_p90_ms"),
        ("spawn -> 1st turn p99 ms", "spawn_p99_ms"),
        ("spawn -> 1st turn max ms", "spawn_max_ms"),
        ("  spawn call p50 ms", "spawn_call_p50_ms"),
        ("trees of 100 cancelled", "cancel_trees"),
        ("cancel 100 median ms", "cancel_tree_100_ms"),
        ("cancel 100 max ms", "cancel_tree_100_max_ms"),
        ("  all KILLED on the bus ms", "cancel_tree_100_killed_ms"),
        ("takeovers measured", "takeovers"),
        ("takeover -> turn p50 ms", "takeover_p50_ms"),
        ("takeover -> turn p99 ms", "takeover_p99_ms"),
        ("takeover -> turn max ms", "takeover_max_ms"),
        ("  with CLI interrupt p50 ms", "takeover_with_cli_p50_ms"),
        ("  CLI interrupt p50 ms", "cli_interrupt_p50_ms"),
        ("  CLI interrupt p99 ms", "cli_interrupt_p99_ms"),
        ("  CLI processes used", "takeover_cli_processes"),
        ("mails into a live turn", "live_mails"),
        ("mail -> live turn p50 ms", "mail_to_live_turn_p50_ms"),
        ("mail -> live turn p99 ms", "mail_to_live_turn_p99_ms"),
        ("processes at hub kill -9", "orphans_processes"),
        ("  left 10 s after the kill", "orphans_after_hub_kill"),
        ("  all gone after ms", "orphans_gone_ms"),
        ("elapsed s", "elapsed_s"),
    ]
    return backend_table(result, rows)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(
        __doc__,
        argv,
        both=True,
        counts=[
            ("--spawns", "measured spawns"),
            ("--trees", "trees of 100 to cancel"),
            ("--takeovers", "measured takeovers"),
            ("--mails", "mails pushed into a live turn"),
        ],
    )
    run_main(args, lambda: run(make_plan(args)), table)


if __name__ == "__main__":
    main()
