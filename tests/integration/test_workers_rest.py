"""Workers over REST (``/v1/workers``, W2–W8): every route, each refusal with its code and
status, and the live stream of a worker's subtree showing a spawned child run and complete."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.workers.records import SpawnSpec, StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.discussion_support import within
from tests.integration.test_channels import Served, sse_events
from tests.integration.test_workers import Script, scripted


def refused(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["code"]


async def scripted_with_token(
    make_agent: MakeAgent, runtimes: StaticRuntimes, name: str
) -> tuple[Script, AgentHandle]:
    handle = await make_agent(name, runtime={"kind": "scripted"})
    script = Script(name)
    runtimes.set(name, ScriptedRuntime(script.reply))
    return script, handle


async def idle(hub: Hub) -> None:
    await within(hub.tasks.wait_idle(), "the turns to end")


async def test_start_spawn_result_views_and_artifacts_over_rest(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    _, lead = await scripted_with_token(make_agent, runtimes, "lead")
    helper = await scripted(make_agent, runtimes, "helper")
    helper.replies = lambda turn: "found 3 flaky tests"
    op = api(hub.operator_token)
    assert (await api(None).get("/v1/workers")).status_code == 401

    r = await op.post("/v1/workers", json={"agent_id": "lead", "prompt": "Audit the tests"})
    assert r.status_code == 201, r.text
    root = r.json()
    assert (root["agent_id"], root["purpose"], root["parent_worker_id"]) == ("lead", "root", None)
    await idle(hub)
    assert (await op.get(f"/v1/workers/{root['id']}")).json()["state"] == "idle"
    assert refused(await op.post("/v1/workers", json={"prompt": "x"})) == (400, "agent_required")
    r = await op.post("/v1/workers", json={"agent_id": "nobody", "prompt": "x"})
    assert refused(r) == (404, "agent_not_found")

    r = await op.post(
        f"/v1/workers/{root['id']}/spawn",
        json={"prompt": "Find the flaky tests", "agent_id": "helper", "block_parent": True},
    )
    assert r.status_code == 201, r.text
    child = r.json()
    assert (child["parent_worker_id"], child["trace_id"]) == (root["id"], root["trace_id"])
    await idle(hub)
    done = (await op.get(f"/v1/workers/{child['id']}")).json()
    assert done["state"] == "completed"
    assert (done["result"]["summary"], done["result"]["success"]) == ("found 3 flaky tests", True)
    assert (await op.get(f"/v1/workers/{root['id']}")).json()["blocked_on_message_id"] is None

    listed = await op.get("/v1/workers", params={"state": ["completed", "idle"]})
    assert [w["id"] for w in listed.json()] == [child["id"], root["id"]]
    assert [w["id"] for w in (await op.get("/v1/workers?state=completed")).json()] == [child["id"]]
    assert refused(await op.get("/v1/workers?state=bogus")) == (422, "validation_error")

    [tree] = (await op.get(f"/v1/workers/{child['id']}/tree")).json()
    assert (tree["id"], tree["state"]) == (root["id"], "idle")
    assert [(n["id"], n["state"], n["children"]) for n in tree["children"]] == [
        (child["id"], "completed", [])
    ]

    r = await op.get(f"/v1/sessions/{root['session_id']}/topology")
    assert r.status_code == 200, r.text
    topo = r.json()
    assert topo["session"]["id"] == root["session_id"]
    assert [w["id"] for w in topo["workers"]] == [root["id"]]
    assert topo["tree"][0]["children"][0]["id"] == child["id"]
    [child_session] = topo["child_sessions"]
    assert (child_session["id"], child_session["spawned_by_worker_id"]) == (
        child["session_id"],
        root["id"],
    )
    kinds = {(m["kind"], m["to"]) for m in topo["messages"]}
    assert kinds == {
        ("task-dispatch", f"session:{child['session_id']}"),
        ("task-result", f"session:{root['session_id']}"),
    }
    assert refused(await op.get("/v1/sessions/vs-nope/topology")) == (404, "session_not_found")
    # A runtime's own session state is shown to the session's agent and the operator only.
    state = {"session_id": "helper-runtime-session"}

    async def set_state(tx: Any) -> None:
        await tx.update("sessions", child["session_id"], runtime_state=state)

    await hub.store.write(set_state)
    as_op = (await op.get(f"/v1/sessions/{root['session_id']}/topology")).json()
    assert as_op["child_sessions"][0]["runtime_state"] == state
    as_lead = await api(lead.token).get(f"/v1/sessions/{root['session_id']}/topology")
    assert as_lead.status_code == 200, as_lead.text
    assert as_lead.json()["child_sessions"][0]["runtime_state"] is None
    assert as_lead.json()["session"]["runtime_state"] == {}

    # A summary over the budget travels as an artifact reference.
    hub.settings.worker_result_budget_tokens = 10
    helper.replies = lambda turn: "y" * 200
    r = await op.post(
        f"/v1/workers/{root['id']}/spawn", json={"prompt": "write it all", "agent_id": "helper"}
    )
    await idle(hub)
    result = (await op.get(f"/v1/workers/{r.json()['id']}")).json()["result"]
    assert (result["summary"], result["summary_tokens"]) == ("", 50)
    art = await op.get(f"/v1/artifacts/{result['artifact_id']}")
    assert art.status_code == 200, art.text
    assert (art.json()["content"], art.json()["worker_id"]) == ("y" * 200, r.json()["id"])
    assert refused(await op.get("/v1/artifacts/art-nope")) == (404, "artifact_not_found")

    # Results are reported once, by a child; a finished worker does not change state again.
    r = await op.post(f"/v1/workers/{child['id']}/result", json={"summary": "again"})
    assert refused(r) == (409, "worker_finished")
    r = await op.post(f"/v1/workers/{root['id']}/result", json={"summary": "x"})
    assert refused(r) == (400, "not_a_child")
    r = await op.post(f"/v1/workers/{child['id']}/release")
    assert refused(r) == (409, "illegal_worker_transition")
    assert r.json()["details"] == {"worker_id": child["id"], "state": "completed", "to": "released"}
    assert refused(await op.get("/v1/workers/w-nope")) == (404, "worker_not_found")


async def test_a_child_reports_its_result_and_others_are_refused_over_rest(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    lead, lead_handle = await scripted_with_token(make_agent, runtimes, "lead")
    lead.gate("long job")
    other = await make_agent("other", runtime={"kind": "none"})
    as_lead, as_other, op = api(lead_handle.token), api(other.token), api(hub.operator_token)
    root = (await as_lead.post("/v1/workers", json={"prompt": "go"})).json()
    await idle(hub)
    r = await as_lead.post(f"/v1/workers/{root['id']}/spawn", json={"prompt": "long job"})
    assert r.status_code == 201, r.text
    child = r.json()
    await within(lead.started["long job"].wait(), "the child's turn")

    # Nobody else sees or controls them.
    assert refused(await as_other.get(f"/v1/workers/{child['id']}")) == (404, "worker_not_found")
    assert (await as_other.get("/v1/workers")).json() == []
    assert refused(await as_other.get(f"/v1/workers/{root['id']}/tree")) == (
        404,
        "worker_not_found",
    )
    r = await as_other.get(f"/v1/sessions/{root['session_id']}/topology")
    assert refused(r) == (404, "session_not_found")
    # Acting on them is refused as reading them is: the same 404, the same message.
    missing = (await as_other.get(f"/v1/workers/{root['id']}")).json()
    for path, body in (
        ("cancel", {}),
        ("takeover", {"instruction": "stop"}),
        ("spawn", {"prompt": "mine now"}),
        ("resume", {}),
        ("release", None),
        ("heartbeat", {}),
        ("result", {"summary": "mine"}),
    ):
        r = await as_other.post(f"/v1/workers/{root['id']}/{path}", json=body)
        assert refused(r) == (404, "worker_not_found"), path
        assert r.json()["message"] == missing["message"], path
    r = await as_other.post(f"/v1/workers/{child['id']}/result", json={"summary": "mine"})
    assert refused(r) == (404, "worker_not_found")
    assert (await as_lead.get("/v1/workers")).json()[0]["id"] == child["id"]

    r = await as_lead.post(f"/v1/workers/{child['id']}/heartbeat", json={"long_running": True})
    assert r.status_code == 200 and r.json()["long_running"] is True
    r = await as_lead.post(
        f"/v1/workers/{child['id']}/result",
        json={"summary": "partial", "artifacts": ["out.txt"], "success": False, "error": "gave up"},
    )
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["result"]["error"]) == ("failed", "gave up")
    await idle(hub)
    # The turn still waiting for the task was stopped: the result was already in.
    assert lead.cancelled == ["long job"]
    [mail] = (await op.get("/v1/agents/lead/inbox", params={"kind": "task-result"})).json()
    assert (mail["payload"]["worker_id"], mail["payload"]["success"]) == (child["id"], False)
    assert mail["to_id"] == root["session_id"]
    r = await as_lead.post(f"/v1/workers/{child['id']}/heartbeat", json={})
    assert refused(r) == (409, "worker_finished")
    # An agent releases its own root worker when it is done with it.
    r = await as_lead.post(f"/v1/workers/{root['id']}/release")
    assert (r.status_code, r.json()["state"]) == (200, "released")


async def test_takeover_resume_and_cancel_over_rest(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    coder = await scripted(make_agent, runtimes, "coder")
    coder.gate("refactor the parser")
    coder.gate("hold the envelope")
    op = api(hub.operator_token)
    root = (await op.post("/v1/workers", json={"agent_id": "coder", "prompt": "go"})).json()
    await idle(hub)
    r = await op.post(
        f"/v1/workers/{root['id']}/spawn",
        json={"prompt": "refactor the parser", "inherit_context": False},
    )
    child = r.json()
    await within(coder.started["refactor the parser"].wait(), "the child's turn")

    takeover = f"/v1/workers/{child['id']}/takeover"
    r = await op.post(takeover, json={"instruction": "   "})
    assert refused(r) == (400, "empty_instruction")
    r = await op.post(takeover, json={"instruction": "x", "timeout_s": 500})
    assert refused(r) == (400, "invalid_timeout")
    r = await op.post(takeover, json={"instruction": "hold the envelope", "timeout_s": 30})
    assert r.status_code == 200, r.text
    outcome = r.json()
    assert (outcome["interrupted"], outcome["timed_out"]) == (True, False)
    assert outcome["worker"]["pending_takeover_message_id"] == outcome["message_id"]
    assert coder.cancelled == ["refactor the parser"]
    await within(coder.started["hold the envelope"].wait(), "the envelope's turn")
    envelope = coder.turns[-1].prompt.render()
    assert "This is a takeover of an interrupted turn, not a new task" in envelope
    r = await op.post(takeover, json={"instruction": "again"})
    assert refused(r) == (409, "takeover_pending")

    # Cancelling the root stops the child's turn too; an independent child lives on.
    r = await op.post(
        f"/v1/workers/{root['id']}/spawn",
        json={"prompt": "on its own", "independent": True, "inherit_context": False},
    )
    alone = r.json()
    # A reason longer than the stored label (64 characters) is kept whole in the event log.
    reason = "wrong approach: the parser must keep its public API, so renaming it all is out"
    r = await op.post(f"/v1/workers/{root['id']}/cancel", json={"reason": reason, "force": True})
    assert r.status_code == 200, r.text
    cancelled = r.json()["cancelled"]
    assert all(reason.startswith(w["end_reason"]) for w in cancelled)
    assert [(w["id"], w["state"], w["cancel_propagated_from"]) for w in cancelled] == [
        (root["id"], "killed", None),
        (child["id"], "killed", root["id"]),
    ]
    await idle(hub)
    assert (await op.get(f"/v1/workers/{alone['id']}")).json()["state"] == "completed"
    r = await op.post(f"/v1/workers/{root['id']}/cancel", json={})
    assert refused(r) == (409, "worker_finished")
    r = await op.post(f"/v1/workers/{root['id']}/spawn", json={"prompt": "more"})
    assert refused(r) == (409, "worker_finished")
    r = await op.post(f"/v1/workers/{root['id']}/resume", json={"note": "try again"})
    assert refused(r) == (409, "worker_not_resumable")
    r = await op.post(takeover, json={"instruction": "too late"})
    assert refused(r) == (409, "worker_not_takeable")

    # An idle worker may be resumed: a new turn that says what it was working on.
    again = (await op.post("/v1/workers", json={"agent_id": "coder", "prompt": "index"})).json()
    await idle(hub)
    r = await op.post(f"/v1/workers/{again['id']}/resume", json={"note": "use the new schema"})
    assert r.status_code == 200, r.text
    await idle(hub)
    resumed = coder.turns[-1].prompt.render()
    assert "[RESUME]" in resumed and "use the new schema" in resumed


@contextlib.asynccontextmanager
async def following(
    client: httpx.AsyncClient, path: str
) -> AsyncIterator[asyncio.Queue[dict[str, Any] | None]]:
    """Read an event stream into a queue in the background; None marks its end."""
    seen: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def follow() -> None:
        async with client.stream("GET", path) as response:
            assert response.status_code == 200, await response.aread()
            async for event in sse_events(response):
                await seen.put(event)
        await seen.put(None)

    reader = asyncio.create_task(follow())
    try:
        yield seen
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def until_state(
    seen: asyncio.Queue[dict[str, Any] | None], worker_id: str, state: str
) -> list[dict[str, Any]]:
    """The stream's events up to the one that shows ``worker_id`` in ``state``."""
    got: list[dict[str, Any]] = []
    while True:
        event = await within(seen.get(), f"{worker_id} {state} on the stream")
        assert event is not None, f"the stream ended before {worker_id} was {state}: {got}"
        got.append(event)
        data = event["data"]
        if event["event"] == "worker" and (data["id"], data["state"]) == (worker_id, state):
            return got


async def test_the_stream_shows_a_spawned_child_run_and_complete_and_ends_with_the_tree(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, port: int
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    gate = lead.gate("slow child")
    other = await make_agent("other", runtime={"kind": "none"})
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="plan"))
    await idle(hub)
    headers = {"Authorization": f"Bearer {hub.operator_token}"}
    async with (
        Served(hub, port) as served,
        httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as client,
    ):
        path = f"/v1/workers/{root.id}/stream"
        r = await client.get(path, headers={"Authorization": f"Bearer {other.token}"})
        assert refused(r) == (404, "worker_not_found")
        async with following(client, path) as seen:
            first = await within(seen.get(), "the tree")
            assert first is not None and first["event"] == "tree"
            assert [w["id"] for w in first["data"]["workers"]] == [root.id]
            assert first["data"]["tree"][0]["state"] == "idle"

            child = await hub.workers.spawn(
                operator, root.id, SpawnSpec(prompt="slow child", inherit_context=False)
            )
            await until_state(seen, child.id, "running")
            gate.set()
            await until_state(seen, child.id, "completed")
            # Another trace's workers are not on this stream.
            elsewhere = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="x"))
            await idle(hub)
            await hub.workers.release(operator, root.id)
            rest = await until_state(seen, root.id, "released")
            assert all(e["data"].get("id") != elsewhere.id for e in rest)
            # Everything it watched has ended: the stream ends.
            assert await within(seen.get(), "the stream's end") is None
        # A stream of a subtree that has ended sends the tree and ends at once.
        async with following(client, f"/v1/workers/{child.id}/stream") as seen:
            ended = await within(seen.get(), "the tree")
            assert ended is not None and ended["event"] == "tree"
            assert [(w["id"], w["state"]) for w in ended["data"]["workers"]] == [
                (child.id, "completed")
            ]
            assert await within(seen.get(), "the stream's end") is None
