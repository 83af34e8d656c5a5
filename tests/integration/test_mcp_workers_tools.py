"""S3 worker tools (W3–W8) through the MCP server in memory: remote agents as children take
their task-dispatch turn with wait_for_turn and finish it with report_result or speak, a parent
spawns, cancels and takes over through tools, every refusal with its code, and API agents
spawning and reporting through function calling inside their turns."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from mcp import Client

from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.service.hub import Hub
from parley.service.tools.toolbox import NOT_IN_A_TURN
from parley.service.workers.control import wait_turn
from parley.service.workers.records import SpawnSpec, StartSpec
from parley.surfaces.mcp import PROFILES, build_mcp
from tests.conftest import AgentHandle, MakeAgent
from tests.fakes.model_server import FakeCall, FakeReply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.discussion_support import within
from tests.integration.mcp_support import WAIT_S, data, refusal, take_turn

WORKER_TOOLS = [
    "spawn_child",
    "report_result",
    "cancel_worker",
    "takeover",
    "topology",
    "worker_status",
    "heartbeat",
    "read_artifact",
]
Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect(hub: Hub) -> Connect:
    """An in-memory MCP session of the ``workers`` profile as the holder of ``token``."""

    @asynccontextmanager
    async def open_session(token: str | None, profile: str = "workers") -> AsyncIterator[Client]:
        async with Client(build_mcp(hub, profile, token=token)) as client:
            yield client

    return open_session


async def remote(make_agent: MakeAgent, agent_id: str, *accepts: str) -> AgentHandle:
    return await make_agent(
        agent_id, runtime={"kind": "remote"}, accepts_channels_from=list(accepts)
    )


async def code_of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    return str(refusal(await client.call_tool(tool, arguments))["code"])


async def task_result(client: Client) -> dict[str, Any]:
    """The next task-result mail in the caller's inbox, skipping other mail."""
    for _ in range(20):
        got = data(await client.call_tool("wait_for_mail", {"timeout_s": WAIT_S}))
        assert not got["timed_out"], "no task-result arrived"
        for msg in got["messages"]:
            if msg["kind"] == "task-result":
                return dict(msg)
    raise AssertionError("no task-result among the mail")


# -- the profile and its manual ------------------------------------------------------------------
async def test_the_workers_profile_offers_the_worker_tools_with_their_rules(
    connect: Connect, make_agent: MakeAgent
) -> None:
    lead = await remote(make_agent, "lead")
    assert list(PROFILES["workers"]) == [
        "whoami",
        *WORKER_TOOLS,
        "wait_for_turn",
        "speak",
        "check_inbox",
        "wait_for_mail",
    ]
    # Over the default profile's token budget: they have a profile of their own.
    assert not set(WORKER_TOOLS) & set(PROFILES["default"])
    async with connect(lead.token) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == list(PROFILES["workers"])
    manual = {t.name: t.description or "" for t in listed}
    for rule in ("task-dispatch", "task-result", "artifact", "block_parent", "independent"):
        assert rule in manual["spawn_child"], rule
    for code in ("worker_not_found", "worker_too_deep", "worker_too_many_children"):
        assert code in manual["spawn_child"], code
    for rule in ("speak", "artifact", "not_a_child", "worker_finished", "nothing after it"):
        assert rule in manual["report_result"], rule
    for rule in ("independent children", "keep running", "cancel_propagated_from"):
        assert rule in manual["cancel_worker"], rule
    for rule in ("interrupt", "envelope", "takeover of an interrupted turn", "takeover_pending"):
        assert rule in manual["takeover"], rule
    assert "stale" in manual["heartbeat"] and "long_running" in manual["heartbeat"]
    assert "final" in manual["worker_status"]


# -- a remote child ------------------------------------------------------------------------------
async def test_a_remote_child_takes_its_dispatch_turn_and_reports_its_result(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    lead = await remote(make_agent, "lead")
    kid = await remote(make_agent, "kid", "lead")
    hub.settings.worker_result_budget_tokens = 20
    async with connect(lead.token) as parent, connect(kid.token) as child:
        spawned = data(
            await parent.call_tool(
                "spawn_child",
                {
                    "prompt": "Find the flaky tests in the parser",
                    "agent_id": "kid",
                    "block_parent": True,
                    "expected_artifacts": ["flaky.txt"],
                },
            )
        )
        assert (spawned["agent_id"], spawned["state"]) == ("kid", "running")
        # Without a parent named, the parent is the caller's main worker (made on first use).
        main = data(
            await parent.call_tool("worker_status", {"worker_id": spawned["parent_worker_id"]})
        )
        assert (main["agent_id"], main["purpose"], main["channel_id"]) == (
            "lead",
            "main",
            lead.principal.work_channel_id,
        )
        assert main["blocked_on_message_id"] == spawned["dispatch_message_id"]

        turn = await take_turn(child)
        assert turn["channel_id"] == spawned["channel_id"]
        assert "Find the flaky tests in the parser" in turn["prompt"]
        assert "flaky.txt" in turn["prompt"]
        # Reported through the tool: the worker ends, and the turn still waiting is withdrawn.
        summary = "Three flaky tests: " + "test_parse_x, " * 10
        reported = data(
            await child.call_tool("report_result", {"summary": summary, "artifacts": ["flaky.txt"]})
        )
        assert (reported["id"], reported["state"]) == (spawned["id"], "completed")
        assert reported["result"]["artifacts"] == ["flaky.txt"]
        artifact_id = reported["result"]["artifact_id"]
        await hub.tasks.wait_idle()
        body = refusal(await child.call_tool("speak", {"turn_id": turn["turn_id"], "text": "late"}))
        # The withdrawn turn takes no answer: nothing more is posted for the task.
        assert body["code"] == "new_message", body

        # The parent's task-result carries a reference, and the parent is unblocked.
        mail = await task_result(parent)
        assert mail["to_id"] == main["session_id"]
        assert (mail["payload"]["worker_id"], mail["payload"]["success"]) == (spawned["id"], True)
        assert artifact_id in mail["body"] and summary not in mail["body"]
        after = data(await parent.call_tool("worker_status", {"worker_id": main["id"]}))
        assert "blocked_on_message_id" not in after
        part = data(
            await parent.call_tool(
                "read_artifact", {"artifact_id": artifact_id, "offset": 0, "limit": 20}
            )
        )
        assert part["content"] == summary[:20]
        assert (part["total_chars"], part["next_offset"]) == (len(summary), 20)
        rest = data(
            await parent.call_tool(
                "read_artifact", {"artifact_id": artifact_id, "offset": 20, "limit": 10_000}
            )
        )
        assert part["content"] + rest["content"] == summary and "next_offset" not in rest

        # The parent's map of its main session: the child's session and the mail.
        topo = data(await parent.call_tool("topology", {}))
        assert topo["session"]["id"] == main["session_id"]
        assert [s["id"] for s in topo["child_sessions"]] == [spawned["session_id"]]
        assert [c["id"] for c in topo["tree"][0]["children"]] == [spawned["id"]]
        assert {m["kind"] for m in topo["messages"]} == {"task-dispatch", "task-result"}
        assert await code_of(child, "report_result", {"summary": "again"}) == "worker_required"
        again = {"summary": "again", "worker_id": spawned["id"]}
        assert await code_of(child, "report_result", again) == "worker_finished"


async def test_a_remote_child_answers_with_speak_and_the_reply_is_its_result(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    lead = await remote(make_agent, "lead")
    kid = await remote(make_agent, "kid", "lead")
    async with connect(lead.token) as parent, connect(kid.token) as child:
        spawned = data(
            await parent.call_tool(
                "spawn_child", {"prompt": "Summarise the log", "agent_id": "kid"}
            )
        )
        turn = await take_turn(child)
        await child.call_tool("speak", {"turn_id": turn["turn_id"], "text": "All green."})
        mail = await task_result(parent)
        assert "All green." in mail["body"]
        done = data(await child.call_tool("worker_status", {"worker_id": spawned["id"]}))
        assert (done["state"], done["result"]["summary"]) == ("completed", "All green.")
        listed = data(await child.call_tool("worker_status", {"state": ["completed"]}))
        assert [w["id"] for w in listed["workers"]] == [spawned["id"]]


# -- the parent's controls -----------------------------------------------------------------------
async def test_the_parent_takes_over_and_cancels_its_children_through_tools(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    lead = await remote(make_agent, "lead")
    kid = await remote(make_agent, "kid", "lead")
    async with connect(lead.token) as parent, connect(kid.token) as child:
        first = data(
            await parent.call_tool("spawn_child", {"prompt": "Port the parser", "agent_id": "kid"})
        )
        turn = await take_turn(child)
        assert await code_of(
            parent, "takeover", {"worker_id": first["id"], "instruction": " "}
        ) == ("empty_instruction")
        took = data(
            await parent.call_tool(
                "takeover",
                {"worker_id": first["id"], "instruction": "Keep the old API.", "timeout_s": 30},
            )
        )
        assert (took["interrupted"], took["timed_out"]) == (True, False)
        assert took["worker"]["id"] == first["id"]
        again = {"worker_id": first["id"], "instruction": "and more"}
        assert await code_of(parent, "takeover", again) == "takeover_pending"
        # The interrupted turn is gone; the next one carries the envelope.
        refused = refusal(await child.call_tool("speak", {"turn_id": turn["turn_id"], "text": "x"}))
        assert refused["code"] == "new_message", refused
        envelope = await take_turn(child)
        assert envelope["turn_id"] != turn["turn_id"]
        assert "This is a takeover of an interrupted turn, not a new task" in envelope["prompt"]
        assert "Keep the old API." in envelope["prompt"]
        assert "Port the parser" in envelope["prompt"]
        await child.call_tool(
            "speak", {"turn_id": envelope["turn_id"], "text": "Ported, API kept."}
        )
        mail = await task_result(parent)
        assert "Ported, API kept." in mail["body"]

        # A subtree: the child's own child goes with it, an independent one stays.
        second = data(
            await parent.call_tool("spawn_child", {"prompt": "Index the repo", "agent_id": "kid"})
        )
        turn = await take_turn(child)
        # In its own turn's channel over MCP a child names its worker as the parent.
        grand = data(
            await child.call_tool(
                "spawn_child",
                {"prompt": "Index the docs", "parent_worker_id": second["id"]},
            )
        )
        alone = data(
            await child.call_tool(
                "spawn_child",
                {
                    "prompt": "Index the tests",
                    "parent_worker_id": second["id"],
                    "independent": True,
                },
            )
        )
        # Only its parent (or whoever is above it) may cancel: not the child's own agent here.
        assert await code_of(child, "cancel_worker", {"worker_id": second["id"]}) == (
            "worker_forbidden"
        )
        cancelled = data(
            await parent.call_tool("cancel_worker", {"worker_id": second["id"], "reason": "moot"})
        )
        assert [(w["id"], w["state"]) for w in cancelled["cancelled"]] == [
            (second["id"], "killed"),
            (grand["id"], "killed"),
        ]
        assert cancelled["count"] == 2
        status = data(await parent.call_tool("worker_status", {"worker_id": alone["id"]}))
        assert status["state"] == "running"
        assert await code_of(parent, "cancel_worker", {"worker_id": second["id"]}) == (
            "worker_finished"
        )
        failed = await task_result(parent)
        payload = failed["payload"]
        assert (payload["worker_id"], payload["success"]) == (second["id"], False)

        # The child's heartbeat covers its unfinished workers; the independent one is among them.
        beat = data(await child.call_tool("heartbeat", {"long_running": True}))
        assert alone["id"] in [w["id"] for w in beat["workers"]]
        assert data(await child.call_tool("worker_status", {"worker_id": alone["id"]}))[
            "long_running"
        ]
        assert await code_of(parent, "heartbeat", {"worker_id": alone["id"]}) == "worker_forbidden"
        await hub.workers.cancel(operator, alone["id"])
        await hub.tasks.wait_idle()


async def test_worker_tool_refusals(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    lead = await remote(make_agent, "lead")
    await remote(make_agent, "kid", "lead")
    stranger = await remote(make_agent, "stranger")
    async with connect(lead.token) as parent, connect(stranger.token) as other:
        assert await code_of(other, "topology", {}) == "session_required"
        assert await code_of(other, "report_result", {"summary": "x"}) == "worker_required"
        assert await code_of(other, "worker_status", {"worker_id": "w-nope"}) == "worker_not_found"
        assert await code_of(other, "read_artifact", {"artifact_id": "art-x"}) == (
            "artifact_not_found"
        )
        assert data(await other.call_tool("heartbeat", {})) == {"workers": [], "count": 0}
        # An agent that does not accept channels from the caller cannot be handed work.
        args = {"prompt": "do my job", "agent_id": "stranger"}
        assert await code_of(parent, "spawn_child", args) == "membership_consent_required"
        spawned = data(await parent.call_tool("spawn_child", {"prompt": "x", "agent_id": "kid"}))
        main_id = spawned["parent_worker_id"]
        # Others' workers are not disclosed, nor may they be touched: acting on one is refused
        # as reading it is.
        assert await code_of(other, "worker_status", {"worker_id": spawned["id"]}) == (
            "worker_not_found"
        )
        assert data(await other.call_tool("worker_status", {})) == {"workers": [], "count": 0}
        topo = {"session_id": spawned["session_id"]}
        assert await code_of(other, "topology", topo) == "session_not_found"
        for tool, arguments in (
            ("cancel_worker", {"worker_id": spawned["id"]}),
            ("takeover", {"worker_id": spawned["id"], "instruction": "mine"}),
            ("spawn_child", {"prompt": "x", "parent_worker_id": spawned["id"]}),
            ("report_result", {"summary": "x", "worker_id": spawned["id"]}),
            ("heartbeat", {"worker_id": spawned["id"]}),
        ):
            assert await code_of(other, tool, arguments) == "worker_not_found", tool
        # The parent's main worker has no parent to report to.
        root = {"summary": "x", "worker_id": main_id}
        assert await code_of(parent, "report_result", root) == "not_a_child"
        timeout = {"worker_id": spawned["id"], "instruction": "x", "timeout_s": 999}
        assert await code_of(parent, "takeover", timeout) == "invalid_timeout"
        assert await code_of(parent, "worker_status", {"state": ["bogus"]}) == "validation_error"
        await hub.workers.cancel(operator, main_id)
        assert await code_of(
            parent, "spawn_child", {"prompt": "x", "parent_worker_id": main_id}
        ) == ("worker_finished")
        await hub.tasks.wait_idle()


# -- API agents, by function calling -------------------------------------------------------------
def openai_runtime(model: FakeOpenAIServer) -> dict[str, Any]:
    return {
        "kind": "openai",
        "model": "fake-model",
        "base_url": model.base_url,
        "api_key": "test-key",
        "max_retries": 0,
    }


async def test_an_api_agents_turn_spawns_from_its_own_worker_and_a_child_turn_reports(
    hub: Hub, operator: Principal, connect: Connect, make_agent: MakeAgent
) -> None:
    async with FakeOpenAIServer() as model:
        await make_agent("alice", runtime=openai_runtime(model), accepts_channels_from=["alice"])
        kid = await remote(make_agent, "kid", "alice")
        model.script(
            FakeReply(
                text="",
                calls=[
                    FakeCall("spawn_child", {"prompt": "Check the docs", "agent_id": "kid"}),
                    FakeCall("worker_status", {}),
                ],
            ),
            FakeReply(text="Handed the docs to kid."),
        )
        root = await hub.workers.start(operator, StartSpec(agent_id="alice", prompt="Plan it"))
        assert root.task_id is not None
        # Not wait_idle: the child's turn waits for kid, which answers further down.
        await within(wait_turn(hub.workers, root.task_id), "alice's turn")
        offered = [t["function"]["name"] for t in model.requests[0]["tools"]]
        assert [n for n in offered if n in WORKER_TOOLS] == [
            n for n in WORKER_TOOLS if n not in NOT_IN_A_TURN
        ]
        assert "takeover" not in offered and "heartbeat" not in offered
        results = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
        spawned, listed = (json.loads(r) for r in results)
        # The turn's own worker is the parent: no other worker is made for alice.
        assert spawned["parent_worker_id"] == root.id
        assert spawned["trace_id"] == root.trace_id
        assert {w["id"] for w in listed["workers"]} == {root.id, spawned["id"]}

        async with connect(kid.token) as child:
            turn = await take_turn(child)
            assert turn["channel_id"] == spawned["channel_id"]
            await child.call_tool("speak", {"turn_id": turn["turn_id"], "text": "Docs are fine."})
        await within(hub.tasks.wait_idle(), "kid's turn")
        # The result comes back to alice's session (and, not blocking, wakes nobody).
        inbox = await hub.mail.inbox(operator, "alice", InboxFilter(kind="task-result"))
        assert [m.to_id for m in inbox] == [root.session_id]
        assert "Docs are fine." in inbox[0].body

        # An API child reports through the tool inside its turn; the turn ends there.
        model.script(
            FakeReply(
                text="",
                calls=[
                    FakeCall(
                        "report_result",
                        {"summary": "Nothing to fix.", "artifacts": ["notes.md"]},
                    )
                ],
            ),
            FakeReply(text="This reply is never the result."),
        )
        child = await hub.workers.spawn(
            operator, root.id, SpawnSpec(prompt="Review the review", agent_id="alice")
        )
        await within(hub.tasks.wait_idle(), "the child's turn")
        done = await hub.workers.get(operator, child.id)
    assert done.state == "completed"
    assert done.result is not None
    assert (done.result.summary, done.result.artifacts) == ("Nothing to fix.", ["notes.md"])
    messages = await hub.channels.messages(operator, child.channel_id)
    assert not any("never the result" in m.content for m in messages)
    inbox = await hub.mail.inbox(operator, "alice", InboxFilter(kind="task-result"))
    assert [m.payload["worker_id"] for m in inbox][-1] == child.id
