"""Discussion turn overhead, prompt size and supersede races (SPEC Q1, Q3, Q5).

Three measurements on one hub in this process (a temporary data root; on PostgreSQL a
throwaway database), with the scripted runtime answering at once:

* ``turn_overhead_*``: the hub's own time per turn. A wrapper around each agent's runtime
  notes the monotonic time when the hub calls it and when it returns; the span from one turn's
  return to the next turn's call in the same task is pure hub work: parsing the reply, the
  commit transaction (trigger check and position, message, its event, the trace record),
  choosing the next speaker and building its prompt; at the start of a round also the round's
  own transaction. A group of 4 members talks for 5 rounds per task.
* ``prompt_chars_at_*``: the size of a speaker's prompt when its channel holds N messages of
  similar size: flat beyond the 128-message window, bounded per entry
  (``prompt_entry_char_cap``) and in total (``prompt_transcript_char_budget``): with long
  messages the budget, not the count, sets the window (``prompt_entries_oversized_at_*``).
* ``supersede_*``: randomized interleavings of a newer user message with a running discussion
  (before the runtime call, during it, between its return and the commit); afterwards no agent
  message may have been accepted after a newer trigger (``stale_accepted`` must be 0). The same
  runs against a deliberately broken hub (commit without the trigger check) show that the
  measure finds stale replies when they exist.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from common import (
    TimedRuntime,
    conditions,
    distribution,
    filler,
    load_average,
    measure_backend,
    ms,
    parse_args,
    run_main,
)
from hub_server import percentile, progress
from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.adapters.store.sql import SqlTx
from parley.core import discussion as d
from parley.core.channels import REJECT_REASONS, ChannelMessage
from parley.core.identity import Principal
from parley.core.ports import Tx
from parley.core.runtime import NO_REPLY, Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.testing import StaticRuntimes

REPLY_CHARS = 240
PROMPT_POINTS = (16, 64, 128, 256, 512, 1000, 2000)
QUICK_PROMPT_POINTS = (16, 128, 512, 1000)
OVERSIZED_CHARS = 10_000
REJECT_CODES = set(REJECT_REASONS)
PHASES = ("before_call", "during", "before_commit")


@dataclass(frozen=True)
class Plan:
    backend: str
    quick: bool
    seed: int
    overhead_tasks: int
    prompt_points: tuple[int, ...]
    oversized_messages: int
    supersede_runs: int
    mutant_runs: int
    concurrency: int


def make_plan(args: argparse.Namespace) -> Plan:
    quick = bool(args.quick)
    return Plan(
        backend=args.backend,
        quick=quick,
        seed=args.seed if args.seed is not None else random.SystemRandom().randrange(2**31),
        overhead_tasks=args.tasks or (12 if quick else 100),
        prompt_points=QUICK_PROMPT_POINTS if quick else PROMPT_POINTS,
        oversized_messages=160 if quick else 300,
        supersede_runs=args.runs or (200 if quick else 1000),
        mutant_runs=50 if quick else 200,
        concurrency=16,
    )


async def _agent(hub: Hub, operator: Principal, agent_id: str) -> None:
    await hub.identity.create_agent(operator, AgentSpec(id=agent_id, runtime={"kind": "scripted"}))


# -- 1. turn overhead (Q1) -----------------------------------------------------------------------
@dataclass
class CallLog:
    """When the hub called each runtime and when the runtime returned."""

    calls: list[tuple[str | None, float, float, float, float]] = field(default_factory=list)

    def note(
        self, turn: Turn, wall_in: float, wall_out: float, cpu_in: float, cpu_out: float
    ) -> None:
        self.calls.append((turn.task_id, wall_in, wall_out, cpu_in, cpu_out))


async def bench_overhead(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    log = CallLog()
    members = [f"speaker-{i}" for i in range(1, 5)]
    for member in members:
        await _agent(hub, operator, member)
        reply = filler(f"{member} answers", REPLY_CHARS)
        runtimes.set(member, TimedRuntime(ScriptedRuntime(lambda _t, r=reply: r), log.note))
    channel = await hub.channels.create(
        operator, ChannelSpec(name="overhead", members=members, discussion_rounds=5)
    )
    progress(f"overhead: 1 warm-up task, then {plan.overhead_tasks} tasks of 5 rounds x 4")
    await hub.channels.post(operator, channel.id, filler("warm-up topic", REPLY_CHARS))
    await hub.tasks.wait_idle()
    log.calls.clear()
    began = time.perf_counter()
    for i in range(plan.overhead_tasks):
        await hub.channels.post(operator, channel.id, filler(f"topic {i}", REPLY_CHARS))
        await hub.tasks.wait_idle()
    wall = time.perf_counter() - began
    spans: list[float] = []
    cpu_spans: list[float] = []
    round_starts: list[float] = []
    in_round: list[float] = []
    position = 0
    for before, after in zip(log.calls, log.calls[1:], strict=False):
        position = position + 1 if before[0] == after[0] else 0
        if before[0] != after[0]:
            continue
        span = (after[1] - before[2]) * 1000
        spans.append(span)
        cpu_spans.append((after[3] - before[4]) * 1000)
        # The first call of a round also waits for the round's own small transaction.
        (round_starts if position % len(members) == 0 else in_round).append(span)
    cpu_spans.sort()
    round_starts.sort()
    in_round.sort()
    tasks = await hub.tasks.of_channel(operator, channel.id)
    ends = Counter(t.end_reason for t in tasks[1:])
    result = {
        "turns": len(log.calls),
        "overhead_spans": len(spans),
        **distribution("turn_overhead", spans),
        "turn_overhead_cpu_p50_ms": ms(percentile(cpu_spans, 50)),
        "turn_overhead_in_round_p50_ms": ms(percentile(in_round, 50)),
        "turn_overhead_round_start_p50_ms": ms(percentile(round_starts, 50)),
        "turn_wall_mean_ms": ms(1000 * wall / max(len(log.calls), 1)),
        "overhead_task_ends": dict(ends),
    }
    progress(
        f"overhead: {len(spans)} spans p50 {result['turn_overhead_p50_ms']} ms, "
        f"p99 {result['turn_overhead_p99_ms']} ms (thread CPU p50 "
        f"{result['turn_overhead_cpu_p50_ms']} ms)"
    )
    return result


# -- 2. prompt size (Q3) -------------------------------------------------------------------------
async def _fill(hub: Hub, channel_id: str, count: int, size: int) -> None:
    """Append ``count`` human messages directly (no trigger), in chunks of one transaction."""
    sender = "operator"
    while count > 0:
        chunk = min(count, 200)

        async def job(tx: Tx, n: int = chunk) -> None:
            for _ in range(n):
                await hub.channels.append(
                    tx, channel_id, sender_id=sender, sender_kind="human", content=filler("f", size)
                )

        await hub.store.write(job)
        count -= chunk


async def _prompt_curve(
    hub: Hub,
    runtimes: StaticRuntimes,
    operator: Principal,
    name: str,
    points: tuple[int, ...],
    size: int,
) -> dict[int, tuple[int, int]]:
    """For each N: fill the channel to N - 1 messages, post the N-th as a trigger and note the
    prompt of the turn it starts (characters, transcript entries)."""
    seen: list[tuple[int, int]] = []

    def record(turn: Turn) -> str:
        seen.append((turn.prompt.char_count(), len(turn.prompt.transcript)))
        return filler("noted", size)

    agent_id = f"reader-{name}"
    await _agent(hub, operator, agent_id)
    runtimes.set(agent_id, ScriptedRuntime(record))
    channel = await hub.channels.create(
        operator, ChannelSpec(name=f"prompt-{name}", members=[agent_id], discussion_rounds=1)
    )
    curve: dict[int, tuple[int, int]] = {}
    for target in points:
        async with hub.store.read() as tx:
            found = await tx.get_channel(channel.id)
        assert found is not None
        await _fill(hub, channel.id, target - found.last_seq - 1, size)
        await hub.channels.post(operator, channel.id, filler(f"question at {target}", size))
        await hub.tasks.wait_idle()
        curve[target] = seen[-1]
    return curve


async def bench_prompt(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    progress(f"prompt: channel sizes {list(plan.prompt_points)}")
    curve = await _prompt_curve(hub, runtimes, operator, "even", plan.prompt_points, REPLY_CHARS)
    big_points = (128, plan.oversized_messages)
    progress(f"prompt: {OVERSIZED_CHARS}-character messages at {list(big_points)}")
    big = await _prompt_curve(hub, runtimes, operator, "big", big_points, OVERSIZED_CHARS)
    top = max(plan.prompt_points)
    return {
        "prompt_chars_at_128": curve[128][0],
        "prompt_chars_at_1000": curve[1000][0],
        "prompt_chars_by_messages": {str(n): chars for n, (chars, _) in curve.items()},
        "prompt_entries_by_messages": {str(n): entries for n, (_, entries) in curve.items()},
        "prompt_growth_128_to_max": round(curve[top][0] / curve[128][0], 4),
        f"prompt_chars_oversized_at_{big_points[1]}": big[big_points[1]][0],
        f"prompt_entries_oversized_at_{big_points[1]}": big[big_points[1]][1],
        "prompt_oversized_message_chars": OVERSIZED_CHARS,
        "prompt_entry_char_cap": d.ENTRY_CHAR_CAP,
        "prompt_transcript_char_budget": d.TRANSCRIPT_CHAR_BUDGET,
    }


# -- 3. supersede under randomized interleavings (Q5) -------------------------------------------
@dataclass
class Hook:
    """Post the next user message when the ``turn``-th call of the task of trigger ``after``
    reaches ``phase``; ``concurrent`` posts it without waiting, ``yields`` loop turns later."""

    after: int
    turn: int
    phase: str
    concurrent: bool
    yields: int
    fired: str | None = None


@dataclass
class Run:
    index: int
    rng: random.Random
    members: list[str]
    rounds: int
    hooks: list[Hook]
    silence: float
    channel_id: str = ""
    triggers: list[str] = field(default_factory=list)
    calls: Counter[tuple[str | None, str]] = field(default_factory=Counter)
    posts: list[asyncio.Future[None]] = field(default_factory=list)
    finished: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class Races:
    """The seams and the runtime of every supersede run, dispatched by channel."""

    def __init__(self, hub: Hub, operator: Principal) -> None:
        self.hub = hub
        self.operator = operator
        self.runs: dict[str, Run] = {}
        hub.tasks.before_call = lambda turn: self.at(turn, "before_call")
        hub.tasks.before_commit = lambda turn: self.at(turn, "before_commit")
        self._unsubscribe = hub.tasks.hooks.on_finished(self.finished)

    def detach(self) -> None:
        self.hub.tasks.before_call = None
        self.hub.tasks.before_commit = None
        self._unsubscribe()

    async def reply(self, turn: Turn) -> str:
        run = self.runs[turn.channel_id]
        await self.at(turn, "during")
        for _ in range(run.rng.randrange(4)):
            await asyncio.sleep(0)
        if run.rng.random() < run.silence:
            return NO_REPLY
        return filler(f"{turn.agent.id} on {turn.trigger_id} round {turn.round}", 120)

    async def at(self, turn: Turn, phase: str) -> None:
        run = self.runs.get(turn.channel_id)
        if run is None:
            return
        key = (turn.trigger_id, phase)
        number = run.calls[key]
        run.calls[key] += 1
        for hook in run.hooks:
            if (
                hook.fired is None
                and phase == hook.phase
                and number == hook.turn
                and turn.trigger_id in run.triggers
                and run.triggers.index(turn.trigger_id) == hook.after
            ):
                await self.fire(run, hook, phase)

    async def fire(self, run: Run, hook: Hook, how: str) -> None:
        hook.fired = how
        # Shielded: the runtime call that fires a hook may be cancelled by that very message,
        # and a post must never be cut off between its commit and the start of its task.
        post = asyncio.ensure_future(self.post(run, f"U{len(run.triggers) + 1}"))
        run.posts.append(post)
        if hook.concurrent:
            for _ in range(hook.yields):
                await asyncio.sleep(0)
        else:
            await asyncio.shield(post)

    async def post(self, run: Run, label: str) -> None:
        # The trigger id is known once the post returns; the hooks that wait for this
        # trigger's task match calls by it, and its task cannot call before we resume.
        posted = await self.hub.channels.post(self.operator, run.channel_id, filler(label, 80))
        run.triggers.append(posted.message.id)

    async def finished(self, task: Any) -> None:
        run = self.runs.get(task.channel_id)
        if run is not None:
            run.finished += 1
            run.ended.set()


def draw_run(index: int, seed: int, agents: list[str]) -> Run:
    rng = random.Random(f"{seed}/{index}")
    members = rng.sample(agents, rng.choice((2, 3)))
    rounds = rng.randint(1, 3)
    turns = len(members) * rounds
    hooks = [
        Hook(0, rng.randrange(turns), rng.choice(PHASES), rng.random() < 0.5, rng.randrange(4))
    ]
    if rng.random() < 0.35:
        hooks.append(
            Hook(1, rng.randrange(turns), rng.choice(PHASES), rng.random() < 0.5, rng.randrange(4))
        )
    return Run(index, rng, members, rounds, hooks, silence=rng.choice((0.0, 0.0, 0.15)))


async def drive(races: Races, run: Run) -> None:
    hub, operator = races.hub, races.operator
    channel = await hub.channels.create(
        operator,
        ChannelSpec(name=f"race-{run.index}", members=run.members, discussion_rounds=run.rounds),
    )
    run.channel_id = channel.id
    races.runs[channel.id] = run
    await races.post(run, "U1")
    while True:
        await run.ended.wait()
        run.ended.clear()
        await asyncio.gather(*run.posts)
        if run.finished < len(run.triggers):
            continue  # every trigger starts a task; wait until each has finished
        # The hook's task ended before its chosen call (a silent round ends a group early):
        # post the message after the end instead, which is a legal interleaving too.
        late = [h for h in run.hooks if h.fired is None and h.after < len(run.triggers)]
        if not late:
            break
        await races.fire(run, late[0], "after_end")


@dataclass
class Verdict:
    runs: int = 0
    stale: int = 0
    orphans: int = 0
    seq_faults: int = 0
    unfinished: int = 0
    bad_codes: int = 0
    latest_superseded: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    ends: Counter[str] = field(default_factory=Counter)
    phases: Counter[str] = field(default_factory=Counter)


async def judge(hub: Hub, operator: Principal, run: Run, verdict: Verdict) -> None:
    """Count stale replies: an agent message of trigger T committed after a later trigger T'
    (seq(T) < seq(T') < seq(message)) is one the linearisation point should have refused."""
    messages: list[ChannelMessage] = await hub.channels.messages(
        operator, run.channel_id, limit=10_000
    )
    verdict.runs += 1
    if [m.seq for m in messages] != list(range(1, len(messages) + 1)):
        verdict.seq_faults += 1
    trigger_seq = {m.id: m.seq for m in messages if m.sender_kind == "human"}
    for m in messages:
        if m.sender_kind != "agent":
            continue
        verdict.accepted += 1
        own = trigger_seq.get(m.trigger_id or "")
        if own is None:
            verdict.orphans += 1
        elif any(own < seq < m.seq for seq in trigger_seq.values()):
            verdict.stale += 1
    tasks = await hub.tasks.of_channel(operator, run.channel_id)
    for task in tasks:
        verdict.ends[task.end_reason or "none"] += 1
        if task.status != "finished":
            verdict.unfinished += 1
        for call in await hub.tasks.invocations(operator, task.id):
            if call.outcome == "rejected":
                verdict.rejected[call.reason or "none"] += 1
                verdict.bad_codes += (call.reason or "") not in REJECT_CODES
    if tasks and tasks[-1].end_reason == "superseded":
        verdict.latest_superseded += 1
    for hook in run.hooks:
        mode = "concurrent" if hook.concurrent else "awaited"
        verdict.phases[hook.fired if hook.fired == "after_end" else f"{hook.fired}/{mode}"] += 1


async def supersede_runs(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, runs: int, plan: Plan, tag: str
) -> Verdict:
    agents = [f"racer-{tag}-{i}" for i in range(1, 4)]
    races = Races(hub, operator)
    for agent in agents:
        await _agent(hub, operator, agent)
        runtimes.set(agent, ScriptedRuntime(races.reply))
    verdict = Verdict()
    try:
        for start in range(0, runs, plan.concurrency):
            batch = [
                draw_run(i, plan.seed, agents)
                for i in range(start, min(runs, start + plan.concurrency))
            ]
            await asyncio.wait_for(asyncio.gather(*(drive(races, r) for r in batch)), 120)
            await hub.tasks.wait_idle()
            for run in batch:
                await judge(hub, operator, run, verdict)
                del races.runs[run.channel_id]
    finally:
        races.detach()
    return verdict


@contextlib.contextmanager
def broken_commit_check() -> Any:
    """A hub whose commit skips the trigger check (only the best-effort cancel flag remains)."""
    original = SqlTx.claim_channel_seq

    async def unchecked(
        self: SqlTx, channel_id: str, *, trigger_id: str, task_id: str, now: Any
    ) -> int | None:
        return await self.next_channel_seq(channel_id, now=now)

    SqlTx.claim_channel_seq = unchecked  # type: ignore[method-assign]
    try:
        yield
    finally:
        SqlTx.claim_channel_seq = original  # type: ignore[method-assign]


async def bench_supersede(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    progress(f"supersede: {plan.supersede_runs} randomized runs, seed {plan.seed}")
    began = time.perf_counter()
    verdict = await supersede_runs(hub, runtimes, operator, plan.supersede_runs, plan, "a")
    elapsed = time.perf_counter() - began
    progress(
        f"supersede: {verdict.runs} runs, {verdict.accepted} accepted replies, "
        f"{verdict.stale} stale, rejected {dict(verdict.rejected)}"
    )
    progress(f"supersede: {plan.mutant_runs} runs against a hub without the commit check")
    with broken_commit_check():
        mutant = await supersede_runs(hub, runtimes, operator, plan.mutant_runs, plan, "m")
    progress(f"supersede: the broken hub accepted {mutant.stale} stale replies")
    return {
        "supersede_runs": verdict.runs,
        "stale_accepted": verdict.stale,
        "supersede_seed": plan.seed,
        "supersede_accepted_replies": verdict.accepted,
        "supersede_rejected_by_reason": dict(verdict.rejected),
        "supersede_task_ends": dict(verdict.ends),
        "supersede_injections": dict(sorted(verdict.phases.items())),
        "supersede_orphan_replies": verdict.orphans,
        "supersede_seq_faults": verdict.seq_faults,
        "supersede_unfinished_tasks": verdict.unfinished,
        "supersede_unknown_reason_codes": verdict.bad_codes,
        "supersede_latest_task_superseded": verdict.latest_superseded,
        "supersede_elapsed_s": round(elapsed, 2),
        "mutant_runs": mutant.runs,
        "mutant_stale_accepted": mutant.stale,
    }


# -- driver ---------------------------------------------------------------------------------------
async def run(plan: Plan) -> dict[str, Any]:
    load_before = load_average()
    figures = await measure_backend(
        plan.backend,
        plan,
        (bench_overhead, bench_prompt, bench_supersede),
        home_prefix="parley-bench-discussion-",
        database_prefix="parley_bench_disc_",
    )
    return {"backend": plan.backend, "quick": plan.quick, **figures, **conditions(load_before)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(
        __doc__,
        argv,
        counts=[
            ("--seed", "seed of the supersede runs"),
            ("--runs", "number of supersede runs"),
            ("--tasks", "overhead tasks (20 turns each)"),
        ],
    )
    run_main(args, lambda: run(make_plan(args)))


if __name__ == "__main__":
    main()
