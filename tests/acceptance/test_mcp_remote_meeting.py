"""A meeting of remote agents end to end (R1–R3, R5, R7, R8, R11 over S3): a real ``parley
serve`` hub and three members, each its own OS process running ``meeting_member.py`` with its
own MCP client over Streamable HTTP (the ``rooms`` profile) and its own token. They join one
room, one of them convenes it over MCP, each takes its meeting turns with wait_for_turn/speak,
the round cap ends the meeting, each writes its own minutes in one more turn and finds them in
its inbox. The test then checks the stored transcript, speeches, minutes and members."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.acceptance.cli_support import ServedHub, child_env
from tests.acceptance.test_mcp_remote_discussion import get, wake_task_finished

MEMBER_SCRIPT = Path(__file__).with_name("meeting_member.py")
MEMBERS = ("ana", "ben", "cyd")
CONVENER = "ana"
TOPIC = "Who owns the schema migration?"
MAX_ROUNDS = 2
RUN_TIMEOUT_S = 180.0


@asynccontextmanager
async def member_processes(
    url: str, room_id: str, tokens: dict[str, str]
) -> AsyncIterator[dict[str, asyncio.subprocess.Process]]:
    """One ``meeting_member.py`` process per member; any still running on the way out is
    killed."""
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        for agent_id in MEMBERS:
            args = ["--url", url, "--room", room_id]
            if agent_id == CONVENER:
                args += ["--convene", TOPIC]
            procs[agent_id] = await asyncio.create_subprocess_exec(
                sys.executable,
                str(MEMBER_SCRIPT),
                *args,
                env=child_env(PARLEY_TOKEN=tokens[agent_id]),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        yield procs
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def first_event(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """The first JSON line a member writes (``joined``, or ``failed``)."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), RUN_TIMEOUT_S)
    assert line, "the member exited before it joined"
    event: dict[str, Any] = json.loads(line)
    return event


async def run_to_exit(proc: asyncio.subprocess.Process) -> tuple[int, list[dict[str, Any]], str]:
    out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    assert proc.returncode is not None
    events = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    return proc.returncode, events, err.decode(errors="replace")


async def test_three_remote_agents_hold_a_meeting_over_mcp(hub: ServedHub) -> None:
    operator = {"Authorization": f"Bearer {hub.token}"}
    async with httpx.AsyncClient(base_url=hub.url, headers=operator, timeout=30) as http:
        tokens, work = {}, {}
        for agent_id in MEMBERS:
            response = await http.post(
                "/v1/agents", json={"id": agent_id, "runtime": {"kind": "remote"}}
            )
            assert response.status_code == 201, response.text
            tokens[agent_id] = response.json()["token"]
            work[agent_id] = response.json()["work_channel_id"]
        response = await http.post(
            "/v1/rooms", json={"name": "standup", "config": {"max_rounds": MAX_ROUNDS}}
        )
        assert response.status_code == 201, response.text
        room = response.json()["id"]

        async with member_processes(hub.url, room, tokens) as procs:
            joined = {a: await first_event(procs[a]) for a in MEMBERS}
            for agent_id, event in joined.items():
                assert event == {
                    "event": "joined",
                    "id": agent_id,
                    "room_id": room,
                    "state": "idle-waiting",
                }, event
            # Everyone is a member now: the convener may summon them all.
            convener = procs[CONVENER]
            assert convener.stdin is not None
            convener.stdin.write(b"go\n")
            await convener.stdin.drain()
            results = await asyncio.gather(*(run_to_exit(procs[a]) for a in MEMBERS))
        outputs = {a: events for a, (_, events, _) in zip(MEMBERS, results, strict=True)}
        for agent_id, (status, events, err) in zip(MEMBERS, results, strict=True):
            assert status == 0, f"{agent_id} failed: {events}\n{err}"

        [meeting] = await get(http, f"/v1/rooms/{room}/meetings")
        mid = meeting["id"]
        transcript = await get(http, f"/v1/rooms/meetings/{mid}/transcript")
        speeches = await get(http, f"/v1/rooms/meetings/{mid}/speeches")
        minutes = await get(http, f"/v1/rooms/meetings/{mid}/minutes")
        # The minutes woke each member in its work channel; it answered, and the turn ends.
        for agent_id in MEMBERS:
            await wake_task_finished(http, work[agent_id])
        members = await get(http, f"/v1/rooms/{room}/members")

    convened = next(e for e in outputs[CONVENER] if e["event"] == "convened")
    assert convened["meeting_id"] == mid
    roster = convened["present"]
    assert sorted(roster) == sorted(MEMBERS)
    assert (meeting["status"], meeting["end_reason"]) == ("ended", "round_cap")
    assert (meeting["convened_by"], meeting["topic"]) == (CONVENER, TOPIC)
    assert meeting["speeches"] == len(MEMBERS) * MAX_ROUNDS

    # The transcript holds every speech once, in the order the floor was given (safe rotation:
    # there is no moderator model for a remote convener), and each member's in its own order.
    spoken = [m for m in transcript if m["sender_kind"] == "agent"]
    assert [m["sender_id"] for m in spoken] == roster * MAX_ROUNDS
    for agent_id in MEMBERS:
        said = [e["text"] for e in outputs[agent_id] if e["event"] == "spoke"]
        assert [m["content"] for m in spoken if m["sender_id"] == agent_id] == said
        assert len(said) == MAX_ROUNDS
    assert len({m["content"] for m in spoken}) == len(spoken)
    assert [m["round"] for m in spoken] == [n for n in range(1, MAX_ROUNDS + 1) for _ in roster]
    # From its second speech on, each member answers the others it heard.
    for message in spoken[len(roster) :]:
        others = set(MEMBERS) - {message["sender_id"]}
        assert all(other in message["content"] for other in others), message["content"]
    assert transcript[0]["content"] == f'[Meeting convened by {CONVENER}] Topic: "{TOPIC}"'
    assert transcript[-1]["content"] == "[Meeting adjourned] (round_cap)"
    assert [(s["agent_id"], s["outcome"]) for s in speeches] == [
        (a, "accepted") for a in roster * MAX_ROUNDS
    ]
    assert {s["model_route"] for s in speeches} == {f"remote:{a}" for a in MEMBERS}

    # Each member's own minutes, written in its own process, recorded and delivered to it.
    written = {
        a: next(e["text"] for e in outputs[a] if e["event"] == "minutes_written") for a in MEMBERS
    }
    assert {(m["agent_id"], m["status"], m["text"]) for m in minutes} == {
        (a, "delivered", written[a]) for a in MEMBERS
    }
    assert len(set(written.values())) == len(MEMBERS)
    for agent_id in MEMBERS:
        events = {e["event"]: e for e in outputs[agent_id]}
        assert events["minutes_received"]["text"] == written[agent_id]
        assert events["woken"]["minutes_in_prompt"] is True
        assert (events["ended"]["status"], events["ended"]["end_reason"]) == ("ended", "round_cap")
        assert [e["event"] for e in outputs[agent_id]][-1] == "done"

    # Dismissal restored everyone to the state the summons found.
    assert sorted(m["agent_id"] for m in members) == sorted(MEMBERS)
    assert {(m["state"], m["meeting_id"]) for m in members} == {("idle-waiting", None)}
