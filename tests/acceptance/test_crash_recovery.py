"""Kill -9 of a hub process in the middle of concurrent group discussions, a meeting and mail
(Q4, R7).

The hub runs as its own process (``hub_launcher.py``) with remote agents that this test answers
over REST, so every discussion and the meeting are parked on a pending turn when the hub is
killed, while mail keeps arriving. After a restart on the same data root / database, everything
the API acknowledged is there exactly once, channel positions have no hole, every interrupted
task ended as ``interrupted`` with a note in its channel, none of its turns is still offered, and
a new message starts a new discussion that runs to its end. The meeting is closed as
``interrupted`` with exactly the speeches committed before the kill, its members are back in the
states the summons found, and the room meets again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import free_port

HERE = Path(__file__).parent
START_S = 60.0
WAIT_S = 30.0
ROUNDS = 2
# Three concurrent discussions; agents are not shared, so each agent's next turn is in its own
# channel. The number of turns answered before the kill; the turn after them stays pending.
CHANNELS = {"north": ["n1", "n2"], "south": ["s1", "s2"], "west": ["w1", "w2", "w3"]}
ANSWERED = {"north": 1, "south": 2, "west": 4}
MAIL_BEFORE_KILL = 30
INTERRUPTED_NOTE = "[Discussion Interrupted]"
# A room of three remote members, one of which marked its work done. A human convenes and the
# room has no moderator runtime, so safe rotation gives the floor (least spoken first, never the
# same member twice in a row): four speeches are committed before the kill, and m2's second
# turn stays pending.
MEETING = ["m1", "m2", "m3"]
DONE_MEMBER = "m2"
FLOOR = ["m1", "m2", "m3", "m1", "m2"]
SPOKEN = len(FLOOR) - 1
MEETING_INTERRUPTED_NOTE = "[Meeting interrupted]"


class HubProcess:
    """The hub in a child process; ``kill`` is SIGKILL, nothing gets to clean up."""

    def __init__(self, home: Path, database_url: str, log: Path) -> None:
        self.home = home
        self.database_url = database_url
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        with self.log.open("a") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(HERE / "hub_launcher.py"),
                "--home",
                str(self.home),
                "--database-url",
                self.database_url,
                "--port",
                str(self.port),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_S
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the hub did not start within {START_S:g}s:\n{self.tail()}"
            line = await asyncio.wait_for(self.proc.stdout.readline(), remaining)
            assert line, f"the hub exited before it was ready:\n{self.tail()}"
            if line.strip() == b"READY":
                return

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert await self.proc.wait() == -signal.SIGKILL

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 20)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@contextlib.asynccontextmanager
async def serving(hub: HubProcess) -> AsyncIterator[HubProcess]:
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


def client(url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S + 10
    )


@dataclass
class Mailer:
    """Agents mail each other until the hub dies; only answered sends count as acknowledged."""

    clients: dict[str, httpx.AsyncClient]
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)  # idempotency key -> mail
    enough: asyncio.Event = field(default_factory=asyncio.Event)

    async def send_until_refused(self, sender: str, to: str) -> None:
        n = 0
        while True:
            key = f"{sender}-{n}"
            try:
                r = await self.clients[sender].post(
                    "/v1/mail",
                    json={"to": to, "kind": "info", "subject": key, "idempotency_key": key},
                )
            except httpx.HTTPError:
                return  # the hub is gone; this send was never acknowledged
            assert r.status_code == 201, r.text
            self.acked[key] = r.json()
            if len(self.acked) >= MAIL_BEFORE_KILL:
                self.enough.set()
            n += 1


async def next_turn(agent: httpx.AsyncClient, timeout_s: float = WAIT_S) -> dict[str, Any] | None:
    r = await agent.get("/v1/turns/next", params={"timeout_s": timeout_s})
    if r.status_code == 204:
        return None
    assert r.status_code == 200, r.text
    return dict(r.json())


async def advance(
    channel_id: str, members: list[str], agents: dict[str, httpx.AsyncClient], answers: int
) -> dict[str, Any]:
    """Answer ``answers`` turns of the channel's discussion in order, then return the next
    turn, which is left pending."""
    for k in range(answers + 1):
        member = members[k % len(members)]
        turn = await next_turn(agents[member])
        assert turn is not None, f"{member} got no turn in {channel_id}"
        assert turn["channel_id"] == channel_id
        if k == answers:
            return turn
        r = await agents[member].post(
            f"/v1/turns/{turn['id']}/speak", json={"text": f"{member} answers turn {k}"}
        )
        assert r.status_code == 200, r.text
    raise AssertionError("unreachable")


@dataclass
class HeldMeeting:
    """A meeting left mid-way: its room, the members as the summons found them, the meeting,
    and the turn that stays pending."""

    room_id: str
    members_before: list[dict[str, Any]]
    meeting: dict[str, Any]
    pending: dict[str, Any]


async def hold_meeting(op: httpx.AsyncClient, agents: dict[str, httpx.AsyncClient]) -> HeldMeeting:
    """Convene a room of ``MEETING``, answer ``SPOKEN`` speeches in the rotation's order and
    return once the next speaker's turn is offered, which is left unanswered."""
    r = await op.post("/v1/rooms", json={"name": "standup", "config": {"max_rounds": 3}})
    assert r.status_code == 201, r.text
    room_id = r.json()["id"]
    for member in MEETING:
        r = await op.post(f"/v1/rooms/{room_id}/members", json={"agent_id": member})
        assert r.status_code == 201, r.text
    r = await agents[DONE_MEMBER].post("/v1/rooms/done", json={"done": True})
    assert r.status_code == 200, r.text
    members_before = await room_members(op, room_id)
    assert {m["agent_id"]: m["state"] for m in members_before} == {
        "m1": "idle-waiting",
        "m2": "done",
        "m3": "idle-waiting",
    }
    r = await op.post(f"/v1/rooms/{room_id}/meetings", json={"topic": "Who unblocks whom"})
    assert r.status_code == 201, r.text
    meeting = r.json()
    assert (meeting["status"], meeting["present"]) == ("running", MEETING)
    for k, member in enumerate(FLOOR):
        turn = await next_turn(agents[member])
        assert turn is not None, f"{member} got no meeting turn {k}"
        assert turn["channel_id"] == meeting["channel_id"]
        if k == SPOKEN:
            return HeldMeeting(room_id, members_before, meeting, turn)
        r = await agents[member].post(
            f"/v1/turns/{turn['id']}/speak", json={"text": f"{member} speech {k}"}
        )
        assert r.status_code == 200, r.text
    raise AssertionError("unreachable")


async def room_members(op: httpx.AsyncClient, room_id: str) -> list[dict[str, Any]]:
    r = await op.get(f"/v1/rooms/{room_id}/members")
    assert r.status_code == 200, r.text
    return list(r.json())


async def meeting_record(op: httpx.AsyncClient, meeting_id: str) -> dict[str, Any]:
    """The meeting, its transcript and its speech records, as the API shows them."""
    found: dict[str, Any] = {}
    for key, path in (("meeting", ""), ("transcript", "/transcript"), ("speeches", "/speeches")):
        r = await op.get(f"/v1/rooms/meetings/{meeting_id}{path}")
        assert r.status_code == 200, r.text
        found[key] = r.json()
    return found


async def messages(op: httpx.AsyncClient, channel_id: str) -> list[dict[str, Any]]:
    r = await op.get(f"/v1/channels/{channel_id}/messages", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return list(r.json())


async def tasks(op: httpx.AsyncClient, channel_id: str) -> list[dict[str, Any]]:
    r = await op.get(f"/v1/channels/{channel_id}/tasks")
    assert r.status_code == 200, r.text
    return list(r.json())


async def inbox(op: httpx.AsyncClient, agent: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        r = await op.get(
            f"/v1/agents/{agent}/inbox",
            params={"kind": "info", "include_archived": True, "after_seq": after, "limit": 500},
        )
        assert r.status_code == 200, r.text
        page = r.json()
        if not page:
            return found
        found += page
        after = int(page[-1]["seq"])


async def finished(op: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """Poll the task until it has finished (bounded; each poll is one request)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        r = await op.get(f"/v1/tasks/{task_id}")
        assert r.status_code == 200, r.text
        if r.json()["status"] == "finished":
            return dict(r.json())
        assert time.monotonic() < deadline, f"task {task_id} still running: {r.json()}"
        await asyncio.sleep(0.05)


async def test_kill_9_mid_discussions_meeting_and_mail_loses_and_duplicates_nothing(
    tmp_path: Path, database_url: str
) -> None:
    home = tmp_path / "data"
    home.mkdir(exist_ok=True)
    log = tmp_path / "hub.log"
    first = HubProcess(home, database_url, log)
    await first.start()
    try:
        token = (home / "operator.token").read_text().strip()
        async with client(first.url, token) as op:
            agent_tokens: dict[str, str] = {}
            for member in [*(m for members in CHANNELS.values() for m in members), *MEETING]:
                r = await op.post("/v1/agents", json={"id": member, "runtime": {"kind": "remote"}})
                assert r.status_code == 201, r.text
                agent_tokens[member] = r.json()["token"]
            agents = {name: client(first.url, t) for name, t in agent_tokens.items()}
            channel_ids: dict[str, str] = {}
            topics: dict[str, str] = {}
            running: dict[str, str] = {}
            for name, members in CHANNELS.items():
                r = await op.post(
                    "/v1/im/sessions",
                    json={"name": name, "members": members, "discussion_rounds": ROUNDS},
                )
                assert r.status_code == 201, r.text
                channel_ids[name] = r.json()["id"]
                r = await op.post(
                    f"/v1/im/sessions/{channel_ids[name]}/messages",
                    json={"content": f"Plan the {name} migration"},
                )
                assert r.status_code == 201, r.text
                topics[name] = r.json()["message"]["id"]
                running[name] = r.json()["task_id"]

            senders = [m for members in CHANNELS.values() for m in members]
            mailer = Mailer(agents)
            mail = [
                asyncio.create_task(mailer.send_until_refused(s, senders[(i + 1) % len(senders)]))
                for i, s in enumerate(senders[:3])
            ]
            held_meeting = asyncio.create_task(hold_meeting(op, agents))
            pending = await asyncio.gather(
                *(
                    advance(channel_ids[name], CHANNELS[name], agents, ANSWERED[name])
                    for name in CHANNELS
                )
            )
            held = await held_meeting
            await asyncio.wait_for(mailer.enough.wait(), WAIT_S)
            before = {name: await messages(op, channel_ids[name]) for name in CHANNELS}
            for name in CHANNELS:
                (task,) = await tasks(op, channel_ids[name])
                assert task["id"] == running[name] and task["status"] == "running"
            # The meeting is parked on m2's pending turn: what it committed cannot change now.
            meeting_before = await meeting_record(op, held.meeting["id"])
            members_during = await room_members(op, held.room_id)

            await first.kill()  # mid-way: every discussion and the meeting wait on an answer
            await asyncio.gather(*mail)
            for agent in agents.values():
                await agent.aclose()
    finally:
        await first.stop()

    acked_mail = dict(mailer.acked)
    assert len(acked_mail) >= MAIL_BEFORE_KILL
    for name in CHANNELS:
        # The topic, then one reply per answered turn, all committed before the kill.
        assert [m["sender_kind"] for m in before[name]] == ["human"] + ["agent"] * ANSWERED[name]
    # The convening note, then each answered speech; a record for each, in the meeting's counter.
    spoken = [f"{member} speech {k}" for k, member in enumerate(FLOOR[:SPOKEN])]
    assert meeting_before["meeting"]["status"] == "running"
    assert meeting_before["meeting"]["speeches"] == SPOKEN
    assert [m["sender_kind"] for m in meeting_before["transcript"]] == ["moderator"] + [
        "agent"
    ] * SPOKEN
    assert [m["content"] for m in meeting_before["transcript"][1:]] == spoken
    assert [(s["outcome"], s["message_id"]) for s in meeting_before["speeches"]] == [
        ("accepted", m["id"]) for m in meeting_before["transcript"][1:]
    ]
    assert {m["state"] for m in members_during} == {"in-meeting"}

    second = HubProcess(home, database_url, log)
    async with serving(second), client(second.url, token) as op:
        agents = {name: client(second.url, t) for name, t in agent_tokens.items()}
        for name, channel_id in channel_ids.items():
            after = await messages(op, channel_id)
            assert [m["seq"] for m in after] == list(range(1, len(after) + 1))
            assert len({m["id"] for m in after}) == len(after)
            assert after[: len(before[name])] == before[name]
            assert topics[name] in {m["id"] for m in after}
            (note,) = after[len(before[name]) :]
            assert note["sender_kind"] == "system"
            assert INTERRUPTED_NOTE in note["content"]
            (task,) = await tasks(op, channel_id)
            assert task["id"] == running[name]
            assert (task["status"], task["end_reason"]) == ("finished", "interrupted")

        await check_interrupted_meeting(op, held, meeting_before)

        # The dead hub's pending turns are not offered again and cannot be answered.
        for member, agent in agents.items():
            assert await next_turn(agent, timeout_s=0) is None, member
        for turn in [*pending, held.pending]:
            r = await agents[turn["agent_id"]].post(
                f"/v1/turns/{turn['id']}/speak", json={"text": "too late"}
            )
            assert r.status_code == 409, r.text

        # Mail: each acknowledged message is there once; nothing is there twice.
        stored: list[dict[str, Any]] = []
        for agent_id in agent_tokens:
            stored += await inbox(op, agent_id)
        ids = [m["id"] for m in stored]
        keys = [m["idempotency_key"] for m in stored]
        assert len(set(ids)) == len(ids)
        assert len(set(keys)) == len(keys)
        by_id = {m["id"]: m for m in stored}
        for key, sent in acked_mail.items():
            assert sent["id"] in by_id, f"acknowledged mail {key} was lost"
            assert by_id[sent["id"]]["idempotency_key"] == key
        # Unacknowledged sends cut off by the kill may have committed, but only once.
        assert len(stored) - len(acked_mail) <= 3
        # A client retrying an acknowledged send after the crash gets the original back.
        key, sent = next(iter(acked_mail.items()))
        r = await agents[sent["from_id"]].post(
            "/v1/mail",
            json={"to": sent["to_id"], "kind": "info", "subject": key, "idempotency_key": key},
        )
        assert r.status_code in (200, 201) and r.json()["id"] == sent["id"]

        # The discussion resumes: a new message starts a new task that runs to its end.
        north, members = channel_ids["north"], CHANNELS["north"]
        r = await op.post(
            f"/v1/im/sessions/{north}/messages", json={"content": "Pick up where we left"}
        )
        assert r.status_code == 201, r.text
        resumed = r.json()["task_id"]
        assert resumed not in (None, running["north"])
        for k in range(len(members) * ROUNDS):
            member = members[k % len(members)]
            turn = await next_turn(agents[member])
            assert turn is not None and turn["task_id"] == resumed
            r = await agents[member].post(
                f"/v1/turns/{turn['id']}/speak", json={"text": f"{member} resumes {k}"}
            )
            assert r.status_code == 200, r.text
        assert (await finished(op, resumed))["end_reason"] == "max_rounds"
        final = await messages(op, north)
        assert [m["seq"] for m in final] == list(range(1, len(final) + 1))
        replies = [m for m in final if m.get("task_id") == resumed]
        assert [m["content"] for m in replies] == [
            f"{members[k % len(members)]} resumes {k}" for k in range(len(members) * ROUNDS)
        ]

        # The room meets again: everyone enters at once, as the summons found them.
        await check_room_meets_again(op, agents, held)
        for agent in agents.values():
            await agent.aclose()


async def check_interrupted_meeting(
    op: httpx.AsyncClient, held: HeldMeeting, before: dict[str, Any]
) -> None:
    """R7: the meeting ended as interrupted, its transcript is exactly what was committed
    before the kill plus the closing note, and its members are back where the summons found
    them."""
    after = await meeting_record(op, held.meeting["id"])
    meeting = after["meeting"]
    assert (meeting["status"], meeting["end_reason"]) == ("ended", "interrupted")
    assert meeting["speeches"] == SPOKEN
    transcript = after["transcript"]
    assert [m["seq"] for m in transcript] == list(range(1, len(transcript) + 1))
    assert len({m["id"] for m in transcript}) == len(transcript)
    assert transcript[: len(before["transcript"])] == before["transcript"]
    (note,) = transcript[len(before["transcript"]) :]
    assert note["sender_kind"] == "system"
    assert note["content"].startswith(MEETING_INTERRUPTED_NOTE)
    assert after["speeches"] == before["speeches"]
    assert await room_members(op, held.room_id) == held.members_before


async def check_room_meets_again(
    op: httpx.AsyncClient, agents: dict[str, httpx.AsyncClient], held: HeldMeeting
) -> None:
    r = await op.post(f"/v1/rooms/{held.room_id}/meetings", json={"topic": "Pick up again"})
    assert r.status_code == 201, r.text
    again = r.json()
    assert again["present"] == MEETING and again["awaiting"] == []
    turn = await next_turn(agents[MEETING[0]])
    assert turn is not None and turn["channel_id"] == again["channel_id"]
    r = await op.post("/v1/rooms/stop")
    assert r.status_code == 200, r.text
    assert [(m["id"], m["end_reason"]) for m in r.json()] == [(again["id"], "stopped")]
    assert await room_members(op, held.room_id) == held.members_before
