"""Kill -9 of a hub process in the middle of concurrent group discussions and mail (Q4).

The hub runs as its own process (``hub_launcher.py``) with remote agents that this test answers
over REST, so every discussion is parked on a pending turn when the hub is killed, while mail
keeps arriving. After a restart on the same data root / database, everything the API
acknowledged is there exactly once, channel positions have no hole, every interrupted task ended
as ``interrupted`` with a note in its channel, none of its turns is still offered, and a new
message starts a new discussion that runs to its end.
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


async def test_kill_9_mid_discussion_and_mail_loses_and_duplicates_nothing(
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
            for member in (m for members in CHANNELS.values() for m in members):
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
            pending = await asyncio.gather(
                *(
                    advance(channel_ids[name], CHANNELS[name], agents, ANSWERED[name])
                    for name in CHANNELS
                )
            )
            await asyncio.wait_for(mailer.enough.wait(), WAIT_S)
            before = {name: await messages(op, channel_ids[name]) for name in CHANNELS}
            for name in CHANNELS:
                (task,) = await tasks(op, channel_ids[name])
                assert task["id"] == running[name] and task["status"] == "running"

            await first.kill()  # mid-discussion: every channel waits on a remote answer
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

        # The dead hub's pending turns are not offered again and cannot be answered.
        for member, agent in agents.items():
            assert await next_turn(agent, timeout_s=0) is None, member
        for turn in pending:
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
        for agent in agents.values():
            await agent.aclose()
