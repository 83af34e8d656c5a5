"""Several hubs on one PostgreSQL database (P2, Q4 across hubs): three real ``parley serve``
processes share a fresh database, agents are connected to different ones.

- Mail sent through hub C wakes a ``wait_for_mail`` long poll on hub B.
- A discussion driven by hub A (its trigger was posted there) has remote members answering
  through hubs B and C; the channel and event streams of hub C show every message once, in
  channel order.
- Kill -9 of the hub driving a discussion with a turn in flight: another hub takes the
  discussion over within the lease expiry plus one sweep, ends it with a reason, nothing
  committed is lost or duplicated, and no answer to the dead hub's turn is accepted after the
  takeover. Randomized, many times over (slow).

PostgreSQL only: a SQLite data root is held by one hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.test_crash_recovery import (
    INTERRUPTED_NOTE,
    HubProcess,
    finished,
    messages,
    next_turn,
    tasks,
)

REMOTE_AGENT = Path(__file__).with_name("remote_agent.py")
LEASE_S = 2.0
SWEEP_S = 0.25
WAIT_S = 20.0
KILL_ITERATIONS = 20


@pytest.fixture
async def cluster(
    postgres_only: None, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[list[HubProcess]]:
    """Hubs A, B and C on one database; A started first, so its home holds the operator
    token (the operator is created once, by the first hub)."""
    monkeypatch.setenv("PARLEY_LEASE_S", str(LEASE_S))
    monkeypatch.setenv("PARLEY_LEASE_SWEEP_S", str(SWEEP_S))
    hubs = [new_hub(tmp_path, database_url, name) for name in "abc"]
    try:
        await hubs[0].start()
        await asyncio.gather(hubs[1].start(), hubs[2].start())
        yield hubs
    finally:
        for hub in hubs:
            await hub.stop()


def new_hub(tmp_path: Path, database_url: str, name: str) -> HubProcess:
    home = tmp_path / f"home-{name}"
    home.mkdir(exist_ok=True)
    return HubProcess(home, database_url, tmp_path / f"hub-{name}.log")


def client(url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S + 10
    )


def operator_token(hub: HubProcess) -> str:
    return (hub.home / "operator.token").read_text().strip()


async def make_agents(op: httpx.AsyncClient, names: list[str]) -> dict[str, str]:
    tokens = {}
    for name in names:
        r = await op.post("/v1/agents", json={"id": name, "runtime": {"kind": "remote"}})
        assert r.status_code == 201, r.text
        tokens[name] = r.json()["token"]
    return tokens


class SseReader:
    """Reads a server-sent event stream in the background into a list."""

    def __init__(self, http: httpx.AsyncClient, path: str) -> None:
        self.http = http
        self.path = path
        self.events: list[dict[str, Any]] = []
        self.opened = asyncio.Event()
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async with self.http.stream("GET", self.path, timeout=None) as response:
            assert response.status_code == 200
            self.opened.set()
            event: dict[str, Any] = {}
            async for line in response.aiter_lines():
                if not line:
                    if "data" in event:
                        self.events.append(event)
                        self.changed.set()
                    event = {}
                    continue
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "data":
                    event["data"] = json.loads(value)
                elif field in ("id", "event"):
                    event[field] = value

    async def until(self, done: Any) -> list[dict[str, Any]]:
        """Wait (bounded) until ``done(events)`` holds; return the events."""
        async with asyncio.timeout(WAIT_S):
            while not done(self.events):
                self.changed.clear()
                await self.changed.wait()
        return self.events

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await self.task


async def test_three_hubs_share_mail_turns_and_streams(cluster: list[HubProcess]) -> None:
    a, b, c = cluster
    token = operator_token(a)
    async with client(a.url, token) as op_a, client(c.url, token) as op_c:
        tokens = await make_agents(op_a, ["bob", "carol"])
        bob_b = client(b.url, tokens["bob"])
        carol_c = client(c.url, tokens["carol"])
        events_c = SseReader(op_c, "/v1/events/stream")
        try:
            await events_c.opened.wait()

            # Cross-hub wake: bob waits on B, carol mails him through C.
            waiting = asyncio.create_task(
                bob_b.get("/v1/agents/bob/inbox/wait", params={"timeout_s": WAIT_S})
            )
            r = await carol_c.post(
                "/v1/mail", json={"to": "bob", "kind": "info", "subject": "over here"}
            )
            assert r.status_code == 201, r.text
            sent = r.json()
            woke = await waiting
            assert woke.status_code == 200, woke.text
            assert [m["id"] for m in woke.json()] == [sent["id"]]

            # A discussion driven by A; bob answers through B, carol through C.
            r = await op_a.post(
                "/v1/im/sessions",
                json={"name": "cluster", "members": ["bob", "carol"], "discussion_rounds": 2},
            )
            assert r.status_code == 201, r.text
            channel_id = r.json()["id"]
            channel_c = SseReader(op_c, f"/v1/channels/{channel_id}/stream")
            await channel_c.opened.wait()
            r = await op_a.post(
                f"/v1/im/sessions/{channel_id}/messages", json={"content": "Name the files"}
            )
            assert r.status_code == 201, r.text
            task_id = r.json()["task_id"]
            speakers = {"bob": bob_b, "carol": carol_c}
            for k in range(4):
                name = ["bob", "carol"][k % 2]
                turn = await next_turn(speakers[name])
                assert turn is not None and turn["task_id"] == task_id
                r = await speakers[name].post(
                    f"/v1/turns/{turn['id']}/speak", json={"text": f"{name} says {k}"}
                )
                assert r.status_code == 200, r.text
            task = await finished(op_c, task_id)
            assert task["end_reason"] == "max_rounds"
            stored = await messages(op_c, channel_id)
            assert [m["seq"] for m in stored] == [1, 2, 3, 4, 5]

            # C's channel stream: every message once, in channel order.
            def five_messages(evs: list[dict[str, Any]]) -> bool:
                return sum(e["event"] == "message" for e in evs) >= 5

            got = await channel_c.until(five_messages)
            streamed = [e["data"] for e in got if e["event"] == "message"]
            assert [m["id"] for m in streamed] == [m["id"] for m in stored]
            await channel_c.close()

            # C's event stream: each event once; the channel's messages in order; the task's
            # events come from A, the answers and the mail from the hubs they went through.
            def task_ended(evs: list[dict[str, Any]]) -> bool:
                return any(
                    e["data"]["type"] == "task.finished"
                    and e["data"]["subject"] == f"task:{task_id}"
                    for e in evs
                )

            got = await events_c.until(task_ended)
            ids = [e["id"] for e in got]
            assert len(ids) == len(set(ids))
            posted = [
                e["data"]["payload"]["seq"]
                for e in got
                if e["data"]["type"] == "channel.message"
                and e["data"]["subject"] == f"channel:{channel_id}"
            ]
            assert posted == [1, 2, 3, 4, 5]
            by_type = {e["data"]["type"]: e["data"] for e in got}
            assert by_type["task.started"]["hub_id"] == task["owner"]
            hubs_seen = {e["data"]["hub_id"] for e in got}
            assert len(hubs_seen) >= 2  # the answers went through B and C, the task ran on A
        finally:
            await events_c.close()
            await bob_b.aclose()
            await carol_c.aclose()

    for hub in cluster:
        async with httpx.AsyncClient(base_url=hub.url) as anon:
            r = await anon.get("/readyz")
            assert r.status_code == 200, r.text
            assert (r.json()["bus"], r.json()["lease_sweep"]) == ("listening", "ok")


async def test_tokens_and_idempotency_keys_hold_on_every_hub(cluster: list[HubProcess]) -> None:
    a, b, c = cluster
    token = operator_token(a)
    async with client(a.url, token) as op_a:
        tokens = await make_agents(op_a, ["dora", "eve"])
        async with client(b.url, tokens["dora"]) as dora_b, client(c.url, tokens["dora"]) as dora_c:
            # A resend with the same key through another hub returns the original.
            mail = {"to": "eve", "kind": "info", "subject": "once", "idempotency_key": "k1"}
            first = await dora_b.post("/v1/mail", json=mail)
            assert first.status_code == 201, first.text
            again = await dora_c.post("/v1/mail", json=mail)
            assert again.status_code in (200, 201), again.text
            assert again.json()["id"] == first.json()["id"]

            # A rotation through A revokes the token that B has cached.
            r = await op_a.post("/v1/principals/dora/tokens", json={"rotate": True})
            assert r.status_code == 201, r.text
            deadline = time.monotonic() + WAIT_S
            while True:  # the rotation reaches B through the bus (bounded polling of state)
                r = await dora_b.get("/v1/whoami")
                if r.status_code == 401:
                    break
                assert r.status_code == 200, r.text
                assert time.monotonic() < deadline, "hub B still accepts a rotated token"
                await asyncio.sleep(0.02)


@pytest.mark.slow
async def test_kill_9_of_the_driving_hub_hands_the_discussion_over(
    cluster: list[HubProcess], tmp_path: Path, database_url: str
) -> None:
    seed = int(os.environ.get("PARLEY_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    token = operator_token(cluster[0])
    alive = list(cluster)
    names = ["p", "q", "r"]
    async with client(alive[0].url, token) as op:
        tokens = await make_agents(op, names)
    takeovers: list[float] = []
    for iteration in range(KILL_ITERATIONS):
        context = f"seed {seed}, iteration {iteration}"
        driver = rng.choice(alive)
        others = [h for h in alive if h is not driver]
        members = rng.sample(names, rng.randint(2, 3))
        answered = rng.randint(0, 2 * len(members) - 1)
        race = rng.random() < 0.5  # answer the in-flight turn while the driver dies
        async with contextlib.AsyncExitStack() as stack:
            op_d = await stack.enter_async_context(client(driver.url, token))
            op_o = await stack.enter_async_context(client(others[0].url, token))
            agents = {
                n: await stack.enter_async_context(client(rng.choice(alive).url, tokens[n]))
                for n in names
            }
            r = await op_d.post(
                "/v1/im/sessions",
                json={"name": f"k{iteration}", "members": members, "discussion_rounds": 2},
            )
            assert r.status_code == 201, r.text
            channel_id = r.json()["id"]
            r = await op_d.post(
                f"/v1/im/sessions/{channel_id}/messages", json={"content": f"topic {iteration}"}
            )
            assert r.status_code == 201, r.text
            task_id = r.json()["task_id"]
            for k in range(answered + 1):
                member = members[k % len(members)]
                turn = await next_turn(agents[member])
                assert turn is not None and turn["task_id"] == task_id, context
                if k == answered:
                    break  # the next reply is committed before this turn is offered
                r = await agents[member].post(
                    f"/v1/turns/{turn['id']}/speak", json={"text": f"{member} {k}"}
                )
                assert r.status_code == 200, (context, r.text)
            before = await messages(op_o, channel_id)
            assert len(before) == 1 + answered, context
            late = None
            if race:
                late = asyncio.create_task(
                    agents[turn["agent_id"]].post(
                        f"/v1/turns/{turn['id']}/speak", json={"text": "racing the kill"}
                    )
                )
            await driver.kill()
            killed_at = time.monotonic()
            alive.remove(driver)
            ended = await finished(op_o, task_id)
            takeovers.append(time.monotonic() - killed_at)
            assert ended["end_reason"] == "interrupted", (context, ended)
            if late is not None:
                with contextlib.suppress(httpx.HTTPError):
                    await late
            # After the takeover no answer to the dead hub's turn is accepted.
            survivor = await stack.enter_async_context(
                client(others[0].url, tokens[turn["agent_id"]])
            )
            r = await survivor.post(
                f"/v1/turns/{turn['id']}/speak", json={"text": "after the takeover"}
            )
            assert r.status_code == 409, (context, r.text)
            after = await messages(op_o, channel_id)
            assert [m["seq"] for m in after] == list(range(1, len(after) + 1)), context
            assert len({m["id"] for m in after}) == len(after), context
            assert after[: len(before)] == before, context
            rest = after[len(before) :]
            # At most the racing answer, committed by the driver before it died, then the note.
            if rest[:-1]:
                assert race and [m["content"] for m in rest[:-1]] == ["racing the kill"], context
            assert rest[-1]["sender_kind"] == "system", context
            assert INTERRUPTED_NOTE in rest[-1]["content"], context
            assert not any("after the takeover" in m["content"] for m in after), context
            (task,) = await tasks(op_o, channel_id)
            assert task["status"] == "finished", context
        # Bring the cluster back to three hubs for the next round.
        replacement = new_hub(tmp_path, database_url, f"r{iteration}")
        await replacement.start()
        cluster.append(replacement)
        alive.append(replacement)
    # Within the lease expiry plus one sweep (the dead hub's lock frees at once; the margin
    # is for polling the task through a loaded machine).
    assert max(takeovers) < LEASE_S + SWEEP_S + 5.0, takeovers


async def test_a_discussion_over_mcp_with_each_agent_on_another_hub(
    cluster: list[HubProcess], tmp_path: Path
) -> None:
    """The initiator opens the discussion through hub A (which drives it); its members take
    their turns over MCP through hubs B and C; the callback and the origin wake go through A."""
    a, b, c = cluster
    agents = {"ini": a, "bob": b, "cat": c}
    tokens: dict[str, str] = {}
    async with client(a.url, operator_token(a)) as op:
        for name in agents:
            workspace = tmp_path / "workspaces" / name
            workspace.mkdir(parents=True)
            r = await op.post(
                "/v1/agents",
                json={
                    "id": name,
                    "runtime": {"kind": "remote"},
                    "workspace": str(workspace),
                    "accepts_channels_from": ["ini"],
                },
            )
            assert r.status_code == 201, r.text
            tokens[name] = r.json()["token"]
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        for name, hub in agents.items():
            args = ["--url", hub.url] + (["--open", "bob,cat"] if name == "ini" else [])
            procs[name] = await asyncio.create_subprocess_exec(
                sys.executable,
                str(REMOTE_AGENT),
                *args,
                env={
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(sys.path),
                    "PARLEY_TOKEN": tokens[name],
                },
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        outs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in procs.values())), 180
        )
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    events: dict[str, list[dict[str, Any]]] = {}
    for (name, proc), (out, err) in zip(procs.items(), outs, strict=True):
        events[name] = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
        assert proc.returncode == 0, f"{name} failed: {events[name]}\n{err.decode()}"
    opened = next(e for e in events["ini"] if e["event"] == "opened")
    async with client(b.url, tokens["bob"]) as bob:
        r = await bob.get(f"/v1/channels/{opened['channel_id']}/tasks")
        assert r.status_code == 200, r.text
        (task,) = r.json()
        r = await bob.get(f"/v1/channels/{opened['channel_id']}")
        channel = r.json()
    assert (task["end_reason"], task["accepted"]) == ("unanimous", 6)
    assert channel["status"] == "closed"
    # Driven by the hub the initiator opened it through: the one that is neither B nor C.
    async with client(c.url, operator_token(a)) as op_c:
        r = await op_c.get("/v1/events", params={"subject": f"task:{task['id']}"})
        assert r.status_code == 200, r.text
    hubs = {e["hub_id"] for e in r.json()}
    assert hubs == {task["owner"]}


async def test_a_meeting_whose_convener_and_members_are_on_three_hubs_runs_to_minutes(
    cluster: list[HubProcess],
) -> None:
    """The operator convenes through hub A (A drives the meeting: rotation moderates); rita
    speaks and writes her minutes through hub B, sam through hub C; C's meeting stream shows
    the meeting end, and every member gets its own minutes, delivered."""
    a, b, c = cluster
    token = operator_token(a)
    async with client(a.url, token) as op_a, client(c.url, token) as op_c:
        tokens = await make_agents(op_a, ["rita", "sam"])
        r = await op_a.post("/v1/rooms", json={"name": "across", "config": {"max_rounds": 1}})
        assert r.status_code == 201, r.text
        room_id = r.json()["id"]
        for name in tokens:
            r = await op_a.post(f"/v1/rooms/{room_id}/members", json={"agent_id": name})
            assert r.status_code == 201, r.text
        speakers = {"rita": client(b.url, tokens["rita"]), "sam": client(c.url, tokens["sam"])}
        r = await op_a.post(f"/v1/rooms/{room_id}/meetings", json={"topic": "Schema freeze"})
        assert r.status_code == 201, r.text
        meeting = r.json()
        assert meeting["moderator_route"] == "rotation"
        watch = SseReader(op_c, f"/v1/rooms/meetings/{meeting['id']}/stream")
        try:
            await watch.opened.wait()
            # Two speeches (one round of two), then each member's minutes, in roster order.
            for k, name in enumerate(["rita", "sam", "rita", "sam"]):
                turn = await next_turn(speakers[name])
                assert turn is not None and turn["channel_id"] == meeting["channel_id"]
                minutes = "Write YOUR minutes" in turn["prompt"]["text"]
                assert minutes == (k >= 2)
                text = f"{name}: I own the index" if minutes else f"{name} speaks, turn {k}"
                r = await speakers[name].post(f"/v1/turns/{turn['id']}/speak", json={"text": text})
                assert r.status_code == 200, r.text

            def ended(evs: list[dict[str, Any]]) -> bool:
                return any(e["event"] == "meeting" and e["data"]["status"] == "ended" for e in evs)

            got = await watch.until(ended)
        finally:
            await watch.close()
        final = next(e["data"] for e in got if e["event"] == "meeting" and ended([e]))
        assert (final["end_reason"], final["round"], final["speeches"]) == ("round_cap", 1, 2)
        said = [e["data"]["content"] for e in got if e["event"] == "message"]
        assert "rita speaks, turn 0" in said and "sam speaks, turn 1" in said
        r = await op_c.get(f"/v1/rooms/meetings/{meeting['id']}/minutes")
        assert r.status_code == 200, r.text
        assert {m["agent_id"]: (m["status"], m["text"]) for m in r.json()} == {
            "rita": ("delivered", "rita: I own the index"),
            "sam": ("delivered", "sam: I own the index"),
        }
        r = await speakers["rita"].get(f"/v1/rooms/meetings/{meeting['id']}/minutes")
        assert [m["agent_id"] for m in r.json()] == ["rita"]
        for speaker in speakers.values():
            await speaker.aclose()
