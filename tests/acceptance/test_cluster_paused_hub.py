"""A hub paused past its lease (SIGSTOP) while it drives a worker's turn, two real hubs on one
PostgreSQL database (P2, W7): the other hub takes the turn over, and the worker's turn ends in
the same commit, ``interrupted`` with a reason that names the lost lease, instead of staying
``running`` with nothing running until the stale sweep. When the paused hub wakes (SIGCONT), it
stops its turn and writes nothing over the takeover; the worker resumes at once, on the hub that
was paused, and its new turn runs to its end; the answer to the taken-over turn is refused.

PostgreSQL only: a SQLite data root is held by one hub.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.test_cluster import (
    LEASE_S,
    SWEEP_S,
    WAIT_S,
    client,
    new_hub,
    operator_token,
)
from tests.acceptance.test_crash_recovery import HubProcess, finished, next_turn


@pytest.fixture
async def two_hubs(
    postgres_only: None, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[list[HubProcess]]:
    monkeypatch.setenv("PARLEY_LEASE_S", str(LEASE_S))
    monkeypatch.setenv("PARLEY_LEASE_SWEEP_S", str(SWEEP_S))
    hubs = [new_hub(tmp_path, database_url, name) for name in "ab"]
    try:
        await hubs[0].start()
        await hubs[1].start()
        yield hubs
    finally:
        for hub in hubs:
            if hub.proc is not None and hub.proc.returncode is None:
                hub.proc.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM
            await hub.stop()


async def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


async def until_idle(op: httpx.AsyncClient, worker_id: str) -> None:
    """Poll the worker until it is idle (bounded; each poll is one request)."""
    deadline = time.monotonic() + WAIT_S
    while (state := (await ok(await op.get(f"/v1/workers/{worker_id}")))["state"]) != "idle":
        assert state == "running" and time.monotonic() < deadline, state
        await asyncio.sleep(0.05)


async def worker_events(op: httpx.AsyncClient, worker_id: str) -> list[dict[str, Any]]:
    found = await ok(await op.get("/v1/events", params={"subject": f"worker:{worker_id}"}))
    return list(found)


async def test_a_hub_paused_past_its_lease_leaves_its_worker_interrupted_and_resumable(
    two_hubs: list[HubProcess],
) -> None:
    paused, other = two_hubs
    token = operator_token(paused)
    async with client(paused.url, token) as op_paused, client(other.url, token) as op_other:
        created = await ok(
            await op_paused.post("/v1/agents", json={"id": "lead", "runtime": {"kind": "remote"}}),
            201,
        )
        async with client(other.url, created["token"]) as lead:
            # Started through the hub that will pause: it drives the worker's turn.
            worker = await ok(
                await op_paused.post(
                    "/v1/workers", json={"agent_id": "lead", "prompt": "Port the parser"}
                ),
                201,
            )
            assert worker["state"] == "running"
            turn = await next_turn(lead)
            assert turn is not None and turn["channel_id"] == worker["channel_id"], turn
            task_id = worker["task_id"]

            assert paused.proc is not None
            paused.proc.send_signal(signal.SIGSTOP)
            try:
                task = await finished(op_other, task_id)
                assert task["end_reason"] == "interrupted"
                # The worker's turn ended with the task, in the same commit.
                now = await ok(await op_other.get(f"/v1/workers/{worker['id']}"))
                assert now["state"] == "interrupted", now
                (moved,) = [
                    e
                    for e in await worker_events(op_other, worker["id"])
                    if e["type"] == "worker.interrupted"
                ]
                assert "lease" in moved["payload"]["reason"], moved
                assert moved["payload"]["from"] == "running"
            finally:
                paused.proc.send_signal(signal.SIGCONT)

            # Awake, the paused hub leaves the takeover's end as it is, and resumes the worker.
            assert (await ok(await op_paused.get(f"/v1/workers/{worker['id']}")))["state"] == (
                "interrupted"
            )
            r = await lead.post(f"/v1/turns/{turn['id']}/speak", json={"text": "too late"})
            assert r.status_code == 409, r.text
            resumed = await ok(await op_paused.post(f"/v1/workers/{worker['id']}/resume", json={}))
            assert resumed["state"] == "running"
            again = await next_turn(lead)
            assert again is not None and again["channel_id"] == worker["channel_id"], again
            assert "[RESUME]" in json.dumps(again)
            await ok(await lead.post(f"/v1/turns/{again['id']}/speak", json={"text": "Ported."}))
            done = await finished(op_paused, resumed["task_id"])
            assert done["end_reason"] == "replied", done
            await until_idle(op_other, worker["id"])  # its turn's end commits after the task's
