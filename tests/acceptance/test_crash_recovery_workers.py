"""Kill -9 of ``parley serve`` while workers run (W7, Q4).

A real ``parley serve`` on the backend under test, with remote agents this test answers over
REST, so every worker's turn waits on an answer when the hub is killed: a root worker and its
child run, a second child was cancelled while its own independent child ran on, and mail for
the running child's session waits for its next turn. After a restart on the same data root /
database, every running worker is ``interrupted``, the independent child is flagged as an
orphan (``cancel_propagated_from`` = its dead parent), the cancelled one stays killed, no mail
and no channel message is lost or doubled, the dead hub's turns are withdrawn, and a resumed
worker runs again with its pending session mail injected in front of its turn.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import httpx

from tests.acceptance.cli_support import ServedHub, spawn_hub, wait_ready
from tests.acceptance.test_crash_recovery import client, messages, next_turn
from tests.acceptance.test_mcp_remote_worker import stream_events, until_state

AGENTS = ("lead", "helper", "planner", "scout")
INTERRUPTED_NOTE = "[Turn Interrupted]"
SESSION_MAIL = "Target Python 3.11 only; the 3.10 branch is frozen."


def serve(home: Path, backend: str, database_url: str) -> ServedHub:
    return wait_ready(spawn_hub(home, database_url=database_url if backend == "postgres" else None))


async def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


async def worker(op: httpx.AsyncClient, worker_id: str) -> dict[str, Any]:
    return dict(await ok(await op.get(f"/v1/workers/{worker_id}")))


async def offered(agent: httpx.AsyncClient, channel_id: str) -> dict[str, Any]:
    """The agent's pending turn, which must be in ``channel_id``."""
    turn = await next_turn(agent)
    assert turn is not None and turn["channel_id"] == channel_id, turn
    return turn


def node(tree: list[dict[str, Any]]) -> dict[str, Any]:
    """The tree as {id: (state, cancel_propagated_from, children)}."""
    return {n["id"]: (n["state"], n["cancel_propagated_from"], node(n["children"])) for n in tree}


async def test_kill_9_with_running_workers_interrupts_them_and_loses_nothing(
    tmp_path: Path, backend: str, database_url: str
) -> None:
    home = tmp_path / "home"
    first = serve(home, backend, database_url)
    try:
        token = first.token
        async with client(first.url, token) as op:
            tokens: dict[str, str] = {}
            for name in AGENTS:
                r = await op.post("/v1/agents", json={"id": name, "runtime": {"kind": "remote"}})
                tokens[name] = (await ok(r, 201))["token"]
            agents = {name: client(first.url, t) for name, t in tokens.items()}

            root = await ok(
                await op.post("/v1/workers", json={"agent_id": "lead", "prompt": "Ship 2.0"}), 201
            )
            child = await ok(
                await op.post(
                    f"/v1/workers/{root['id']}/spawn",
                    json={"prompt": "Port the parser", "agent_id": "helper"},
                ),
                201,
            )
            doomed = await ok(
                await op.post(
                    f"/v1/workers/{root['id']}/spawn",
                    json={"prompt": "Coordinate the docs", "agent_id": "planner"},
                ),
                201,
            )
            orphan = await ok(
                await op.post(
                    f"/v1/workers/{doomed['id']}/spawn",
                    json={"prompt": "Survey the wiki", "agent_id": "scout", "independent": True},
                ),
                201,
            )
            # Every turn is offered and left unanswered: in flight when the hub dies.
            in_flight = {
                "lead": await offered(agents["lead"], root["channel_id"]),
                "helper": await offered(agents["helper"], child["channel_id"]),
                "planner": await offered(agents["planner"], doomed["channel_id"]),
                "scout": await offered(agents["scout"], orphan["channel_id"]),
            }
            cancelled = await ok(
                await op.post(f"/v1/workers/{doomed['id']}/cancel", json={"reason": "redo"})
            )
            # The independent child keeps running: after the restart its parent is gone.
            assert [w["id"] for w in cancelled["cancelled"]] == [doomed["id"]]
            sent = await ok(
                await op.post(
                    "/v1/mail",
                    json={
                        "to": f"session:{child['session_id']}",
                        "kind": "context-inject",
                        "subject": "constraint",
                        "body": SESSION_MAIL,
                    },
                ),
                201,
            )
            before = {w["id"]: await worker(op, w["id"]) for w in (root, child, doomed, orphan)}
            assert {i: w["state"] for i, w in before.items()} == {
                root["id"]: "running",
                child["id"]: "running",
                doomed["id"]: "killed",
                orphan["id"]: "running",
            }
            channels_before = {
                w["id"]: await messages(op, w["channel_id"]) for w in (root, child, orphan)
            }
            topology_before = await ok(await op.get(f"/v1/sessions/{root['session_id']}/topology"))
            mail_ids = {m["id"] for m in topology_before["messages"]}
            assert {child["dispatch_message_id"], orphan["dispatch_message_id"]} <= mail_ids
            assert sent["id"] in mail_ids
            for agent in agents.values():
                await agent.aclose()

        first.proc.send_signal(signal.SIGKILL)
        assert first.proc.wait() == -signal.SIGKILL
    finally:
        first.stop()

    second = serve(home, backend, database_url)
    try:
        async with client(second.url, token) as op:
            agents = {name: client(second.url, t) for name, t in tokens.items()}
            after = {i: await worker(op, i) for i in before}
            # Running workers were interrupted; the cancelled one is still killed.
            assert after[root["id"]]["state"] == "interrupted"
            assert after[child["id"]]["state"] == "interrupted"
            assert after[doomed["id"]] == before[doomed["id"]]
            # The independent child of the cancelled parent is an orphan waiting for review.
            assert after[orphan["id"]]["state"] == "interrupted"
            assert after[orphan["id"]]["cancel_propagated_from"] == doomed["id"]
            assert after[child["id"]]["cancel_propagated_from"] is None
            tree = node(await ok(await op.get(f"/v1/workers/{root['id']}/tree")))
            assert tree == {
                root["id"]: (
                    "interrupted",
                    None,
                    {
                        child["id"]: ("interrupted", None, {}),
                        doomed["id"]: (
                            "killed",
                            None,
                            {orphan["id"]: ("interrupted", doomed["id"], {})},
                        ),
                    },
                )
            }

            # Nothing lost or doubled: each channel holds what it held, plus the note that its
            # turn was cut; the mail of the sessions is the same, the session mail still waits.
            for worker_id, was in channels_before.items():
                now = await messages(op, before[worker_id]["channel_id"])
                assert now[: len(was)] == was
                assert len({m["id"] for m in now}) == len(now)
                (note,) = now[len(was) :]
                assert note["sender_kind"] == "system" and INTERRUPTED_NOTE in note["content"]
            topology_after = await ok(await op.get(f"/v1/sessions/{root['session_id']}/topology"))
            assert topology_after["messages"] == topology_before["messages"]
            waiting = await ok(await op.get(f"/v1/mail/{sent['id']}"))
            assert waiting["status"] == "pending" and waiting["body"] == SESSION_MAIL
            for mail_id in (child["dispatch_message_id"], orphan["dispatch_message_id"]):
                dispatch = await ok(await op.get(f"/v1/mail/{mail_id}"))
                assert dispatch["kind"] == "task-dispatch"

            # The dead hub's turns are withdrawn: not offered again, an answer is refused.
            for name, turn in in_flight.items():
                assert await next_turn(agents[name], timeout_s=0) is None, name
                r = await agents[name].post(
                    f"/v1/turns/{turn['id']}/speak", json={"text": "too late"}
                )
                assert r.status_code == 409, r.text

            seen: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            watch = asyncio.create_task(stream_events(op, f"/v1/workers/{root['id']}/stream", seen))
            try:
                # A resume runs the child again, its session mail injected before its turn.
                resumed = await ok(await op.post(f"/v1/workers/{child['id']}/resume", json={}))
                assert resumed["state"] == "running"
                turn = await offered(agents["helper"], child["channel_id"])
                prompt = json.dumps(turn["prompt"])
                assert "[RESUME]" in prompt and "Port the parser" in prompt
                assert "<pending_mail>" in prompt and SESSION_MAIL in prompt
                assert prompt.index("<pending_mail>") < prompt.index("[RESUME]")
                delivered = await ok(await op.get(f"/v1/mail/{sent['id']}"))
                assert delivered["status"] == "delivered"
                await ok(
                    await agents["helper"].post(
                        f"/v1/turns/{turn['id']}/speak", json={"text": "parser ported"}
                    )
                )
                done = await until_state(seen, child["id"], "completed")
                assert done["result"]["summary"] == "parser ported"

                # The orphan resumes too, told that the parent that spawned it is gone.
                await ok(await op.post(f"/v1/workers/{orphan['id']}/resume", json={}))
                turn = await offered(agents["scout"], orphan["channel_id"])
                prompt = json.dumps(turn["prompt"])
                assert "[RESUME]" in prompt and "the parent that spawned you is gone" in prompt
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
            for agent in agents.values():
                await agent.aclose()
    finally:
        second.stop()
