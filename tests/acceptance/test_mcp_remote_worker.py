"""A remote child worker end to end (W3, S1, S2, S3): a real ``parley serve`` hub; the operator
starts a root worker and spawns a child of it over REST for a remote agent, which lives in its
own OS process (``worker_child.py``) with its own MCP client over Streamable HTTP (the
``workers`` profile). The child takes its task-dispatch turn with wait_for_turn and finishes it
with report_result; the operator watches the tree on the worker stream, and the parent's
task-result mail carries the child's summary and artifacts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.acceptance.cli_support import ServedHub, child_env
from tests.acceptance.test_mcp_remote_discussion import get

CHILD_SCRIPT = Path(__file__).with_name("worker_child.py")
RUN_TIMEOUT_S = 120.0
PROMPT = "Count the words of this sentence please"


async def stream_events(
    http: httpx.AsyncClient, path: str, seen: asyncio.Queue[dict[str, Any]]
) -> None:
    async with http.stream("GET", path) as response:
        assert response.status_code == 200, await response.aread()
        event: dict[str, Any] = {}
        async for line in response.aiter_lines():
            if not line:
                if "data" in event:
                    await seen.put(event)
                event = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                event[field] = value.removeprefix(" ")


async def until_state(
    seen: asyncio.Queue[dict[str, Any]], worker_id: str, state: str
) -> dict[str, Any]:
    while True:
        event = await asyncio.wait_for(seen.get(), RUN_TIMEOUT_S)
        data: dict[str, Any] = json.loads(event["data"])
        if event["event"] == "worker" and (data["id"], data["state"]) == (worker_id, state):
            return data


async def test_a_remote_child_reports_its_result_over_mcp(hub: ServedHub) -> None:
    operator = {"Authorization": f"Bearer {hub.token}"}
    async with httpx.AsyncClient(base_url=hub.url, headers=operator, timeout=30) as http:
        r = await http.post("/v1/agents", json={"id": "lead", "runtime": {"kind": "none"}})
        assert r.status_code == 201, r.text
        r = await http.post("/v1/agents", json={"id": "kid", "runtime": {"kind": "remote"}})
        assert r.status_code == 201, r.text
        kid_token = r.json()["token"]
        r = await http.post("/v1/workers", json={"agent_id": "lead", "prompt": "Plan the work"})
        assert r.status_code == 201, r.text
        root = r.json()

        seen: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        reader = asyncio.create_task(stream_events(http, f"/v1/workers/{root['id']}/stream", seen))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD_SCRIPT),
            "--url",
            hub.url,
            env=child_env(PARLEY_TOKEN=kid_token),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            first = await asyncio.wait_for(seen.get(), RUN_TIMEOUT_S)
            assert first["event"] == "tree"
            r = await http.post(
                f"/v1/workers/{root['id']}/spawn",
                json={"prompt": PROMPT, "agent_id": "kid", "block_parent": True},
            )
            assert r.status_code == 201, r.text
            child = r.json()
            await until_state(seen, child["id"], "running")
            finished = await until_state(seen, child["id"], "completed")
            out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        events = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
        assert proc.returncode == 0, f"{events}\n{err.decode(errors='replace')}"

        inbox = await get(http, "/v1/agents/lead/inbox?kind=task-result")
        parent = await get(http, f"/v1/workers/{root['id']}")
        topology = await get(http, f"/v1/sessions/{root['session_id']}/topology")

    by_event = {e["event"]: e for e in events}
    assert by_event["ready"]["id"] == "kid"
    assert by_event["dispatched"] == {
        "event": "dispatched",
        "worker_id": child["id"],
        "channel_id": child["channel_id"],
    }
    summary = by_event["reported"]["summary"]
    assert summary == f"kid counted {len(PROMPT.split())} words in: {PROMPT}"
    assert by_event["reported"]["state"] == "completed"
    assert finished["result"]["summary"] == summary
    assert finished["result"]["artifacts"] == ["word-count.txt"]
    # The parent's session got the task-result with the child's summary and artifacts, and
    # the parent is no longer blocked on it.
    [mail] = inbox
    assert (mail["to_kind"], mail["to_id"]) == ("session", root["session_id"])
    assert mail["correlation_id"] == child["dispatch_message_id"]
    assert summary in mail["body"] and "word-count.txt" in mail["body"]
    assert mail["payload"]["summary"] == summary
    assert mail["payload"]["artifacts"] == ["word-count.txt"]
    assert parent["blocked_on_message_id"] is None
    assert parent["children_worker_ids"] == [child["id"]]
    assert [s["id"] for s in topology["child_sessions"]] == [child["session_id"]]
