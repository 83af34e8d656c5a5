"""The meeting part of ``parley demo``: planner, reviewer and tester meet in a room.

Each of them speaks with a scripted runtime of its own (its model route names it), and every
scripted line is labelled as such. The scene shows what the meeting rules are for: tester has a
turn in flight when planner convenes, so it awaits entry and enters late, at its turn's end;
planner's runtime moderates with scripted decisions; the operator speaks without taking a turn
and the next speaker answers it; each member gets minutes of its own; and dismissal gives every
member back the state the summons found, reviewer "done" included.

The demo holds two scripted turns open (tester's job, reviewer's first speech) and lets them go
when the live view shows what the scene needs, so the story plays the same way every time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import MODERATOR_ID
from parley.core.runtime import Turn, TurnResult
from parley.demo.stage import VOICES, Hold, Stage, reached
from parley.surfaces.cli.meeting_view import MeetingScreen

ROOM = "ingest-team"
TOPIC = "Ship the ingest queue this week: who does what, and what blocks it"
TESTER_JOB = (
    "Run the burst test of the job queue: a 10x burst of high-priority jobs; report the longest "
    "wait of a low-priority job."
)
HUMAN_NOTE = "Operator here: ship it behind a feature flag, so we can switch back to the old queue."

SPEECHES: dict[str, list[str]] = {
    "planner": [
        "Where I stand: the design is settled (priority plus aging) and the table migration is "
        "written. I need reviewer's sign-off on the claim query and tester's burst test before "
        "Thursday's release.",
        "Decision: we release on Thursday. reviewer writes the idempotency note in the handler "
        "guide; tester reruns the burst test; I merge the migration on Wednesday.",
    ],
    "reviewer": [
        "My review is done: SKIP LOCKED with the aging term is correct. One risk is left: a "
        "worker that crashes between claim and ack runs the job again, so handlers must be "
        "idempotent.",
    ],
    "tester": [
        "I came in late: I was running the burst test. Under a 10x burst no low-priority job "
        "waited more than 3 minutes.",
    ],
}
# What tester adds once it has read the operator's note in the transcript.
TESTER_ON_FLAG = (
    " To the operator: agreed, I will rerun the test with the feature flag off as well, so "
    "switching back is tested too."
)
# planner convenes, so planner's runtime moderates (R4); its decisions are scripted.
DECISIONS: list[dict[str, str]] = [
    {"action": "invite", "next": "planner"},
    {"action": "invite", "next": "reviewer"},
    {"action": "invite", "next": "tester"},
    {"action": "invite", "next": "planner"},
    {"action": "adjourn"},
]
MINUTES = {
    "planner": "My actions: merge the migration on Wednesday, release on Thursday behind the "
    "feature flag. I wait for tester's rerun with the flag off.",
    "reviewer": "For me: write the idempotency note in the handler guide (a crash between claim "
    "and ack runs a job again). My review of the claim query is done.",
    "tester": "For me: rerun the burst test with the flag off before Thursday; the 10x burst "
    "stayed under 3 minutes. planner merges on Wednesday.",
}
AFTER_MINUTES = {
    "planner": "Read my minutes: merging the migration on Wednesday.",
    "reviewer": "Read my minutes: writing the idempotency note.",
    "tester": "Back at the burst test: rerunning it with the flag off.",
}


@dataclass
class MeetingScript:
    """The scripted members' lines for the meeting, and the turns the demo holds open."""

    holds: dict[str, Hold] = field(
        default_factory=lambda: {name: Hold() for name in ("job", "reviewer", "back_to_work")}
    )
    speeches: dict[str, list[str]] = field(
        default_factory=lambda: {agent: list(lines) for agent, lines in SPEECHES.items()}
    )
    decisions: list[dict[str, str]] = field(default_factory=lambda: list(DECISIONS))

    async def reply(self, agent: str, turn: Turn) -> str | None:
        """The agent's scripted answer to a turn of the meeting scene, or None for any other."""
        if turn.agent.id == MODERATOR_ID:
            return json.dumps(self.decisions.pop(0) if self.decisions else {"action": "adjourn"})
        if "Write YOUR minutes" in turn.prompt.task:
            return MINUTES[agent]
        if "[Meeting]" in turn.prompt.system:
            return await self.speech(agent, turn)
        latest = turn.prompt.transcript[-1].content if turn.prompt.transcript else ""
        if latest.startswith("[Meeting minutes"):
            if agent == "tester":
                await self.holds["back_to_work"].wait()  # its minutes send it back to work
            return AFTER_MINUTES[agent]
        if agent == "tester" and latest == TESTER_JOB:
            await self.holds["job"].wait()  # a long turn: tester is "working" meanwhile
            return "Burst test done: the longest low-priority wait was 3 minutes."
        return None

    async def speech(self, agent: str, turn: Turn) -> str:
        lines = self.speeches.get(agent) or []
        if agent == "reviewer" and len(lines) == len(SPEECHES["reviewer"]):
            await self.holds["reviewer"].wait()  # the floor is held until the human has spoken
        text = lines.pop(0) if lines else f"{agent} has nothing to add."
        if agent == "tester" and "feature flag" in turn.prompt.user_text():
            text += TESTER_ON_FLAG  # the next speaker sees the human's post in its transcript
        return text


class ScriptedVoice:
    """One demo agent's scripted runtime with a model route of its own, so each member visibly
    speaks with its own (scripted) model; turns outside the meeting scene answer with
    ``otherwise``."""

    kind = "scripted"

    def __init__(self, agent: str, script: MeetingScript, otherwise: Callable[[Turn], str]) -> None:
        self.agent = agent
        self.route = VOICES[agent]

        async def reply(turn: Turn) -> str:
            said = await script.reply(agent, turn)
            return otherwise(turn) if said is None else said

        self._inner = ScriptedRuntime(reply)

    async def respond(self, turn: Turn) -> TurnResult:
        result = await self._inner.respond(turn)
        return replace(result, model_route=self.route)

    async def aclose(self) -> None:
        return None


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a server-sent event stream."""
    event, data = "message", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


class MeetingScene:
    """The meeting part of the demo, driven over HTTP like the rest of it."""

    def __init__(self, demo: Stage, script: MeetingScript, console: Console) -> None:
        self.demo = demo
        self.script = script
        self.console = console

    async def run(self) -> None:
        demo = self.demo
        demo.step("7. A meeting room: late entry, a human's post, minutes for each member")
        if demo.settings.openai_base_url:
            self.console.print(
                "The meeting scene holds scripted turns open to show late entry; it runs with "
                "the scripted runtime only (unset PARLEY_OPENAI_BASE_URL to see it)."
            )
            return
        room = await demo.call(
            demo.op, "POST", "/v1/rooms", json={"name": ROOM, "config": {"max_rounds": 2}}
        )
        for agent, client in demo.clients.items():
            await demo.call(
                client, "POST", f"/v1/rooms/{room['id']}/members", json={"agent_id": agent}
            )
        self.console.print(
            f"room {ROOM!r} ({room['id']}): planner, reviewer and tester joined it themselves; "
            "joining is consent to be summoned"
        )
        await demo.call(demo.clients["reviewer"], "POST", "/v1/rooms/done", json={"done": True})
        await demo.call(
            demo.op,
            "POST",
            f"/v1/channels/{demo.work['tester']}/messages",
            json={"content": TESTER_JOB},
        )
        await reached(self.script.holds["job"].started, "tester working on its job")
        before = await self.states(room["id"])
        voices = Table("member", "runtime", "model route", "state now", title_justify="left")
        for agent, state in before.items():
            voices.add_row(agent, "scripted", VOICES[agent], state)
        self.console.print(voices)
        self.console.print(
            "reviewer marked its work done; the operator gave tester a job, its turn is in flight"
        )
        meeting = await demo.call(
            demo.clients["planner"],
            "POST",
            f"/v1/rooms/{room['id']}/meetings",
            json={"topic": TOPIC},
        )
        self.console.print(
            f"planner convened meeting {meeting['id']}: present {', '.join(meeting['present'])}; "
            f"awaiting entry {', '.join(meeting['awaiting'])} (it enters at its turn's end)"
        )
        await self.watch(meeting)
        await self.report(meeting, before)

    async def watch(self, meeting: dict[str, Any]) -> None:
        """The live view from the meeting's stream; the held turns are let go as the scene
        needs: tester's job once planner has spoken, reviewer's speech once the human has."""
        demo, holds = self.demo, self.script.holds
        self.console.print(
            "[dim]— live view of the meeting (as `parley room watch` shows it) —[/dim]"
        )
        screen = MeetingScreen(self.console, machine=False)
        screen.header(meeting)
        screen.meeting(meeting)
        path = f"/v1/rooms/meetings/{meeting['id']}"
        async with (
            httpx.AsyncClient(base_url=demo.url, headers=demo.op.headers, timeout=None) as client,
            client.stream("GET", f"{path}/stream") as response,
        ):
            async for event, data in sse(response):
                if event == "message":
                    screen.message(data)
                    if data["sender_id"] == "planner":
                        holds["job"].release.set()
                    continue
                if event != "meeting":
                    continue
                if data["status"] == "ended":
                    after = {"after_seq": screen.last_seq}
                    for m in await demo.call(demo.op, "GET", f"{path}/transcript", params=after):
                        screen.message(m)  # anything the stream had not delivered yet
                    screen.meeting(data)
                    screen.minutes(await demo.call(demo.op, "GET", f"{path}/minutes"))
                    return
                screen.meeting(data)
                if "tester" in data["present"] and not holds["reviewer"].release.is_set():
                    await demo.call(
                        demo.op, "POST", f"{path}/messages", json={"content": HUMAN_NOTE}
                    )
                    holds["reviewer"].release.set()

    async def report(self, meeting: dict[str, Any], before: dict[str, str]) -> None:
        """The moderator's decisions, each member's minutes, and the states dismissal restored."""
        demo = self.demo
        events = await demo.call(
            demo.op,
            "GET",
            "/v1/events",
            params={"subject": f"meeting:{meeting['id']}", "limit": 1000},
        )
        decided, entered = [], []
        for e in events:
            p = e["payload"]
            if e["type"] in ("meeting.moderator", "meeting.moderator_fallback"):
                step = f"invite {p['next']}" if p["action"] == "invite" else p["action"]
                label = "scripted" if p.get("scripted") else p.get("model_route")
                why = f", fallback: {p['fallback']}" if p.get("fallback") else ""
                decided.append(f"{step} ({label}{why})")
            elif e["type"] == "meeting.entered" and p.get("late"):
                entered.append(f"{p['agent_id']} entered late in round {p['round']}")
        self.console.print(f"The event log: {'; '.join(entered) or 'nobody entered late'}.")
        self.console.print(
            "The moderator is planner's runtime (planner convened); its decisions: "
            + " → ".join(decided)
        )

        minutes = await demo.call(demo.op, "GET", f"/v1/rooms/meetings/{meeting['id']}/minutes")
        table = Table("member", "written by", "minutes (delivered as mail and to its work channel)")
        for m in minutes:
            table.add_row(m["agent_id"], m["model_route"], m["text"])
        self.console.print(table)
        distinct = len({m["text"] for m in minutes}) == len(minutes)
        self.console.print(f"{len(minutes)} minutes, each member's own: all different = {distinct}")

        # The minutes woke each member in its work channel: planner's and reviewer's turns end at
        # once, tester goes back to its burst test.
        for agent in ("planner", "reviewer"):
            await self.task_end(demo.work[agent])
        await reached(self.script.holds["back_to_work"].started, "tester woken by its minutes")
        after = await self.states(meeting["room_id"])
        summoned = {a: "in-meeting" for a in meeting["present"]}
        summoned.update({a: "awaiting-entry" for a in meeting["awaiting"]})
        table = Table("member", "before the summons", "summoned as", "after dismissal")
        for agent in before:
            table.add_row(agent, before[agent], summoned.get(agent, "-"), after[agent])
        self.console.print(table)
        restored = all(after[a] == before[a] for a in before)
        self.console.print(
            f"every member restored to the state the summons found: {restored}. reviewer is "
            "done again, not 'working' (a member wrongly reported working is awaited at the next "
            "summons for a turn end that never comes); tester, summoned while working, is back "
            "at its burst test, woken by its minutes."
        )
        self.script.holds["back_to_work"].release.set()
        await self.task_end(demo.work["tester"])

    async def states(self, room_id: str) -> dict[str, str]:
        rows = await self.demo.call(self.demo.op, "GET", f"/v1/rooms/{room_id}/members")
        return {m["agent_id"]: m["state"] for m in rows}

    async def task_end(self, channel_id: str) -> None:
        """Wait until the newest task of a channel has finished, from the channel's stream."""
        demo = self.demo
        channel = await demo.call(demo.op, "GET", f"/v1/channels/{channel_id}")
        after = {"last_id": str(channel["last_seq"])}
        async with (
            httpx.AsyncClient(base_url=demo.url, headers=demo.op.headers, timeout=None) as client,
            client.stream("GET", f"/v1/channels/{channel_id}/stream", params=after) as response,
        ):
            # The hub subscribed before it answered: a task that ends now is on the stream.
            tasks = await demo.call(demo.op, "GET", f"/v1/channels/{channel_id}/tasks")
            if not tasks or tasks[-1]["status"] == "finished":
                return
            async for event, data in sse(response):
                if (
                    event == "task"
                    and data["id"] == tasks[-1]["id"]
                    and data["status"] == "finished"
                ):
                    return
