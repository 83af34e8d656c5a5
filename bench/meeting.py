"""Meeting speech overhead, prompt size and convene latency (SPEC R3, R7, §7).

Three measurements on one hub in this process (a temporary data root; on PostgreSQL a
throwaway database), every member and the moderator answering at once with the scripted
runtime:

* ``speech_overhead_*``: the hub's own time per speech. A wrapper around each member's runtime
  notes the monotonic time when the hub calls it and when it returns. Within one meeting, the
  span from one speech's return to the next speech's call, minus the moderator's call that lies
  in it, is pure hub work: committing the speech (its message, its record, the meeting's
  counters), the moderator's prompt and its recorded decision, reading what the next speaker's
  prompt needs, and that prompt (its positioning text and the bounded projection of its own
  context). Four members meet for five rounds, convened by one of them, whose runtime
  moderates by inviting the members in turn.
* ``prompt_chars_at_*``: the size of a speaker's whole prompt (positioning text, projection
  and the quoted transcript) when the meeting's transcript holds N speeches of about the
  speech target (800 characters): eleven members, twenty rounds, one meeting.
  ``entry_prompt_chars_at_*`` is the positioning part alone.
* ``context_chars_per_member_per_meeting``: what lands in a member's own context from one
  meeting of 60 speeches (six members, ten rounds): the mail addressed to it and the messages
  in its work channel from the meeting's start to its end (its minutes, as mail and as the
  message that wakes it, and any notice), beside ``transcript_chars``, the meeting's whole
  transcript. A member's share is ``context_share`` (target: under a tenth). Minutes are
  written at three quarters of the room's minutes limit, as a member that uses its room would.
* ``convene_to_first_speech_*``: from the call that convenes a meeting to the first speech's
  ``channel.message`` event on the hub's live stream (the convening transaction, the driver's
  start, the moderator's decision, the speaker's prompt and the speech's commit).

A table goes to stdout, progress to stderr; the last line of stdout is one JSON object with
every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from common import (
    TimedRuntime,
    backend_table,
    chosen_backends,
    compare_backends,
    distribution,
    filler,
    ms,
    parse_args,
    run_main,
)
from hub_server import percentile, progress
from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core import discussion as d
from parley.core.channels import TRANSCRIPT_WINDOW
from parley.core.identity import MODERATOR_ID, Principal
from parley.core.rooms import DEFAULT_MINUTES_LIMIT, DEFAULT_SPEECH_TARGET
from parley.core.runtime import NO_REPLY, Turn
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.testing import StaticRuntimes

OVERHEAD_MEMBERS = 4
OVERHEAD_ROUNDS = 5
PROMPT_MEMBERS = 11
PROMPT_ROUNDS = 20
PROMPT_POINTS = (10, 50, 100, 128, 150, 200)


@dataclass(frozen=True)
class Plan:
    backends: tuple[str, ...]
    quick: bool
    meetings: int
    speech_chars: int


def make_plan(args: argparse.Namespace) -> Plan:
    quick = bool(args.quick)
    return Plan(
        backends=chosen_backends(args.backend),
        quick=quick,
        meetings=args.meetings or (15 if quick else 100),
        speech_chars=DEFAULT_SPEECH_TARGET,
    )


def _is_minutes(turn: Turn) -> bool:
    return turn.prompt.task.startswith("The meeting on")


def _is_speech(turn: Turn) -> bool:
    return turn.agent.id != MODERATOR_ID and "[Meeting]" in turn.prompt.system


# -- the scripted members and their moderator -----------------------------------------------------
@dataclass
class Call:
    """One runtime call: what it was, for which meeting, and wall / thread-CPU time in and out."""

    kind: str
    meeting_id: str | None
    wall_in: float
    wall_out: float
    cpu_in: float
    cpu_out: float
    prompt_chars: int
    system_chars: int
    entries: int


@dataclass
class Script:
    """The replies of every member: a speech of the given size, minutes of its own, silence in
    its work channel, and, when its runtime moderates, an invitation to the next member in
    roster order (never an adjournment: the round cap ends each meeting)."""

    speech_chars: int
    minutes_chars: int = 0
    # Sizing a prompt renders it: only where sizes are the measure, never inside a timed span.
    size_prompts: bool = False
    calls: list[Call] = field(default_factory=list)
    invited: dict[str, int] = field(default_factory=dict)
    spoken: dict[str, int] = field(default_factory=dict)

    def reply(self, turn: Turn) -> str:
        meeting = turn.session_id or ""
        if turn.agent.id == MODERATOR_ID:
            present = _present(turn.prompt.system)
            n = self.invited.get(meeting, 0)
            self.invited[meeting] = n + 1
            return json.dumps({"action": "invite", "next": present[n % len(present)]})
        if _is_minutes(turn):
            mine = f"{turn.agent.id}: what I take from {meeting}"
            return filler(mine, self.minutes_chars) if self.minutes_chars else mine
        if _is_speech(turn):
            n = self.spoken.get(meeting, 0)
            self.spoken[meeting] = n + 1
            return filler(f"{turn.agent.id} speech {n}", self.speech_chars)
        return NO_REPLY

    def note(
        self, turn: Turn, wall_in: float, wall_out: float, cpu_in: float, cpu_out: float
    ) -> None:
        """Record one runtime call and what it was (sizing the prompt of a speech only when
        sizes are the measure)."""
        kind = (
            "moderator"
            if turn.agent.id == MODERATOR_ID
            else "minutes"
            if _is_minutes(turn)
            else "speech"
            if _is_speech(turn)
            else "work"
        )
        measured = kind == "speech" and self.size_prompts
        self.calls.append(
            Call(
                kind,
                turn.session_id,
                wall_in,
                wall_out,
                cpu_in,
                cpu_out,
                turn.prompt.char_count() if measured else 0,
                len(turn.prompt.system) if measured else 0,
                len(turn.prompt.transcript),
            )
        )


def _present(system: str) -> list[str]:
    for line in system.splitlines():
        if line.startswith("Present: "):
            return [m.strip() for m in line.removeprefix("Present: ").split(",")]
    raise AssertionError("the moderator's prompt names nobody present")


async def _room(
    hub: Hub,
    runtimes: StaticRuntimes,
    operator: Principal,
    names: list[str],
    script: Script,
    rounds: int,
) -> tuple[str, Principal]:
    """A room of ``names`` whose meetings end at the round cap; returns it and its convener (the
    first name)."""
    for name in names:
        await hub.identity.create_agent(operator, AgentSpec(id=name, runtime={"kind": "scripted"}))
        runtimes.set(name, TimedRuntime(ScriptedRuntime(script.reply), script.note))
    room = await hub.rooms.create(
        operator,
        RoomSpec.model_validate(
            # Its agent convener meets again at once: no throttle between measured meetings.
            {"name": names[0], "config": {"max_rounds": rounds, "min_meeting_interval_s": 0}}
        ),
    )
    for name in names:
        await hub.rooms.join(operator, room.id, name)
    return room.id, await hub.identity.require(names[0])


async def _convene(hub: Hub, convener: Principal, room_id: str, topic: str) -> tuple[str, float]:
    """Convene, wait for the meeting and what it starts to end; return the meeting id and the
    milliseconds from the convening call to its first speech on the live stream."""
    # Subscribed before convening: the first speech cannot be published before we listen.
    sub = hub.bus.subscribe(["hub"])
    try:
        began = time.perf_counter()
        meeting = await hub.meetings.convene(convener, room_id, ConveneSpec(topic=topic))
        subject = f"channel:{meeting.channel_id}"
        while True:
            data = await asyncio.wait_for(sub.get(), 60)
            event = data.get("event") or {}
            if (
                event.get("type") == "channel.message"
                and event.get("subject") == subject
                and event.get("actor") not in (MODERATOR_ID, "system")
            ):
                first = (time.perf_counter() - began) * 1000
                break
    finally:
        await sub.close()
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    ended = await hub.meetings.get(convener, meeting.id)
    assert ended.end_reason == "round_cap", f"meeting {meeting.id} ended {ended.end_reason!r}"
    return meeting.id, first


# -- 1. speech overhead and convene latency --------------------------------------------------------
def overhead_spans(calls: list[Call]) -> tuple[list[float], list[float]]:
    """Wall and thread-CPU milliseconds of hub work between consecutive speeches of a meeting,
    the moderator's call in between taken out."""
    wall: list[float] = []
    cpu: list[float] = []
    previous: Call | None = None
    runtime_wall = runtime_cpu = 0.0
    for call in calls:
        if call.kind == "moderator":
            runtime_wall += call.wall_out - call.wall_in
            runtime_cpu += call.cpu_out - call.cpu_in
            continue
        if call.kind != "speech":
            continue
        if previous is not None and previous.meeting_id == call.meeting_id:
            wall.append((call.wall_in - previous.wall_out - runtime_wall) * 1000)
            cpu.append((call.cpu_in - previous.cpu_out - runtime_cpu) * 1000)
        previous = call
        runtime_wall = runtime_cpu = 0.0
    return sorted(wall), sorted(cpu)


async def bench_overhead(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    script = Script(plan.speech_chars)
    names = [f"speaker-{i}" for i in range(1, OVERHEAD_MEMBERS + 1)]
    room_id, convener = await _room(hub, runtimes, operator, names, script, OVERHEAD_ROUNDS)
    progress(
        f"overhead: 1 warm-up meeting, then {plan.meetings} meetings of "
        f"{OVERHEAD_MEMBERS} members x {OVERHEAD_ROUNDS} rounds"
    )
    await _convene(hub, convener, room_id, "warm-up")
    script.calls.clear()
    firsts: list[float] = []
    began = time.perf_counter()
    for i in range(plan.meetings):
        _, first = await _convene(hub, convener, room_id, f"topic {i}")
        firsts.append(first)
    wall = time.perf_counter() - began
    spans, cpu_spans = overhead_spans(script.calls)
    speeches = sum(1 for c in script.calls if c.kind == "speech")
    firsts.sort()
    result = {
        "meetings": plan.meetings,
        "speeches": speeches,
        "overhead_spans": len(spans),
        **distribution("speech_overhead", spans),
        "speech_overhead_cpu_p50_ms": ms(percentile(cpu_spans, 50)),
        "convene_to_first_speech_ms": ms(percentile(firsts, 50)),
        "convene_to_first_speech_p99_ms": ms(percentile(firsts, 99)),
        "meeting_wall_mean_ms": ms(1000 * wall / max(plan.meetings, 1)),
    }
    progress(
        f"overhead: {len(spans)} spans p50 {result['speech_overhead_p50_ms']} ms, p99 "
        f"{result['speech_overhead_p99_ms']} ms; convene to first speech p50 "
        f"{result['convene_to_first_speech_ms']} ms"
    )
    return result


# -- 2. prompt size as the transcript grows -------------------------------------------------------
async def bench_prompt(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    script = Script(plan.speech_chars, size_prompts=True)
    names = [f"member-{i:02d}" for i in range(1, PROMPT_MEMBERS + 1)]
    room_id, convener = await _room(hub, runtimes, operator, names, script, PROMPT_ROUNDS)
    progress(
        f"prompt: one meeting of {PROMPT_MEMBERS} members x {PROMPT_ROUNDS} rounds, "
        f"speeches of {plan.speech_chars} characters"
    )
    await _convene(hub, convener, room_id, "the whole quarter")
    # The n-th speech call of the meeting sees the n speeches committed before it.
    seen = [c for c in script.calls if c.kind == "speech"]
    points = {n: seen[n] for n in PROMPT_POINTS if n < len(seen)}
    return {
        "prompt_chars_at_10": points[10].prompt_chars,
        "prompt_chars_at_200": points[200].prompt_chars,
        "entry_prompt_chars_at_10": points[10].system_chars,
        "entry_prompt_chars_at_200": points[200].system_chars,
        "prompt_chars_by_speeches": {str(n): c.prompt_chars for n, c in points.items()},
        "prompt_entries_by_speeches": {str(n): c.entries for n, c in points.items()},
        "prompt_speech_chars": plan.speech_chars,
        "prompt_transcript_window": TRANSCRIPT_WINDOW,
        "prompt_transcript_char_budget": d.TRANSCRIPT_CHAR_BUDGET,
    }


# -- 3. what one meeting puts in a member's own context -------------------------------------------
SHARE_MEMBERS = 6
SHARE_ROUNDS = 10


async def bench_share(
    hub: Hub, runtimes: StaticRuntimes, operator: Principal, plan: Plan
) -> dict[str, Any]:
    minutes_chars = DEFAULT_MINUTES_LIMIT * 3 // 4
    script = Script(plan.speech_chars, minutes_chars=minutes_chars)
    names = [f"share-{i}" for i in range(1, SHARE_MEMBERS + 1)]
    room_id, convener = await _room(hub, runtimes, operator, names, script, SHARE_ROUNDS)
    progress(f"share: one meeting of {SHARE_MEMBERS} members x {SHARE_ROUNDS} rounds")
    before = {name: await _own_context(hub, name) for name in names}
    meeting_id, _ = await _convene(hub, convener, room_id, "the quarter, member by member")
    after = {name: await _own_context(hub, name) for name in names}
    async with hub.store.read() as tx:
        meeting = await tx.get("meetings", meeting_id)
        messages = await tx.channel_messages(meeting.channel_id, limit=10_000)
    said = [m for m in messages if m.sender_kind in ("agent", "human")]
    transcript_chars = sum(len(m.content) for m in said)
    shares = [after[n] - before[n] for n in names]
    per_member = max(shares)
    return {
        "share_speeches": len(said),
        "transcript_chars": transcript_chars,
        "context_chars_per_member_per_meeting": per_member,
        "context_chars_per_member_mean": round(sum(shares) / len(shares)),
        "context_share": round(per_member / max(transcript_chars, 1), 4),
        "share_minutes_chars": minutes_chars,
    }


async def _own_context(hub: Hub, agent_id: str) -> int:
    """Characters in an agent's own context so far: subject and body of the mail addressed to
    it, and the content of its work channel's messages."""
    async with hub.store.read() as tx:
        m = tx.table("messages").c
        mail = await tx.select("messages", m.recipient_id == agent_id)
        agent = await tx.get("principals", agent_id)
        work = await tx.channel_messages(agent.work_channel_id, limit=10_000)
    return sum(len(x.subject) + len(x.body) for x in mail) + sum(len(x.content) for x in work)


# -- driver ---------------------------------------------------------------------------------------
HEADLINES = (
    "speech_overhead_p50_ms",
    "speech_overhead_p99_ms",
    "convene_to_first_speech_ms",
    "prompt_chars_at_10",
    "prompt_chars_at_200",
    "transcript_chars",
    "context_chars_per_member_per_meeting",
)


async def run(plan: Plan) -> dict[str, Any]:
    return await compare_backends(
        plan,
        (bench_overhead, bench_prompt, bench_share),
        HEADLINES,
        per_backend=HEADLINES[:3],
        home_prefix="parley-bench-meeting-",
        database_prefix="parley_bench_meet_",
    )


def table(result: dict[str, Any]) -> str:
    """The figures as a readable table, one column per backend."""
    rows: list[tuple[str, str]] = [
        ("meetings measured", "meetings"),
        ("speeches", "speeches"),
        ("speech overhead p50 ms", "speech_overhead_p50_ms"),
        ("speech overhead p90 ms", "speech_overhead_p90_ms"),
        ("speech overhead p99 ms", "speech_overhead_p99_ms"),
        ("speech overhead max ms", "speech_overhead_max_ms"),
        ("  thread CPU p50 ms", "speech_overhead_cpu_p50_ms"),
        ("convene -> 1st speech p50 ms", "convene_to_first_speech_ms"),
        ("convene -> 1st speech p99 ms", "convene_to_first_speech_p99_ms"),
    ]
    rows += [
        (f"prompt chars at {n} speeches", f"prompt_chars_by_speeches.{n}") for n in PROMPT_POINTS
    ]
    rows += [
        (f"  transcript entries at {n}", f"prompt_entries_by_speeches.{n}") for n in PROMPT_POINTS
    ]
    rows += [
        ("positioning chars at 10", "entry_prompt_chars_at_10"),
        ("positioning chars at 200", "entry_prompt_chars_at_200"),
        ("transcript chars, 60 speeches", "transcript_chars"),
        ("member's own context chars", "context_chars_per_member_per_meeting"),
        ("  share of the transcript", "context_share"),
        ("elapsed s", "elapsed_s"),
    ]
    return backend_table(result, rows)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(
        __doc__,
        argv,
        both=True,
        counts=[("--meetings", "measured meetings (20 speeches each)")],
    )
    run_main(args, lambda: run(make_plan(args)), table)


if __name__ == "__main__":
    main()
