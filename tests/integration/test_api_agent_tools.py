"""Agents on the ``openai`` and ``anthropic`` runtimes use the hub's tools through function
calling: the real SDKs talk to local fake servers that play tool calls, and the calls run
through the service layer as the agent whose turn it is."""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.core.channels import Task
from parley.core.identity import Principal
from parley.core.mail import InboxFilter
from parley.service.hub import Hub
from parley.service.tools.toolbox import NOT_IN_A_TURN
from parley.surfaces.mcp import PROFILES, build_mcp
from tests.conftest import AgentHandle, MakeAgent
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.model_server import FakeCall, FakeModelServer, FakeReply
from tests.fakes.openai_server import FakeOpenAIServer

SERVERS: dict[str, type[FakeModelServer]] = {
    "openai": FakeOpenAIServer,
    "anthropic": FakeAnthropicServer,
}


@pytest.fixture(params=sorted(SERVERS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def model(kind: str) -> AsyncIterator[FakeModelServer]:
    async with SERVERS[kind]() as fake:
        yield fake


@pytest.fixture
async def alice(
    make_agent: MakeAgent, model: FakeModelServer, kind: str, tmp_path: Path
) -> AgentHandle:
    """An agent whose turns go to the fake model, with a workspace of its own."""
    return await make_agent(
        "alice",
        workspace=str(tmp_path / "ws-alice"),
        runtime={
            "kind": kind,
            "model": "fake-model",
            "base_url": model.base_url,  # type: ignore[attr-defined]
            "api_key": "test-key",
            "max_retries": 0,
        },
    )


async def wake(hub: Hub, operator: Principal, agent: AgentHandle, text: str) -> Task:
    """Give ``agent`` a turn in its work channel and wait until the task ends."""
    channel = agent.principal.work_channel_id
    assert channel is not None
    posted = await hub.channels.post(operator, channel, text)
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    return await hub.tasks.get(operator, posted.task_id)


def tool_names(kind: str, request: dict[str, Any]) -> list[str]:
    if kind == "openai":
        return [t["function"]["name"] for t in request["tools"]]
    return [t["name"] for t in request["tools"]]


def tool_results(kind: str, request: dict[str, Any]) -> list[str]:
    """The tool results a request carries back to the model, in order."""
    if kind == "openai":
        return [m["content"] for m in request["messages"] if m["role"] == "tool"]
    return [
        block["content"]
        for m in request["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block["type"] == "tool_result"
    ]


async def tool_events(hub: Hub) -> list[dict[str, Any]]:
    async with hub.store.read() as tx:
        events = await hub.ctx.events.query(tx, type="agent.tool_called")
    return [{"actor": e.actor, **e.payload} for e in events]


async def test_send_message_and_post_are_made_as_the_agent(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    alice: AgentHandle,
    model: FakeModelServer,
    kind: str,
) -> None:
    bob = await make_agent("bob")
    work = alice.principal.work_channel_id
    model.script(
        FakeReply(
            text="",
            calls=[
                FakeCall(
                    "send_message",
                    {"to": "bob", "kind": "notice", "subject": "hello", "body": "from a tool"},
                ),
                FakeCall("post", {"channel_id": work, "content": "posted through a tool"}),
            ],
        ),
        FakeReply(text="Sent bob a notice and posted."),
    )

    task = await wake(hub, operator, alice, "Tell bob hello.")

    assert task.end_reason != "failed", task.error
    inbox = await hub.mail.inbox(bob.principal, "bob", InboxFilter())
    assert [(m.from_id, m.subject, m.body) for m in inbox] == [("alice", "hello", "from a tool")]
    assert work is not None
    messages = await hub.channels.messages(operator, work)
    posted = [m for m in messages if m.content == "posted through a tool"]
    assert [(m.sender_id, m.sender_kind) for m in posted] == [("alice", "agent")]
    # The final text is the turn's answer, posted as alice after the tools ran.
    assert messages[-1].content == "Sent bob a notice and posted."
    # The model got both results back, in order, as JSON.
    sent, post = (json.loads(r) for r in tool_results(kind, model.requests[1]))
    assert sent["from_id"] == "alice" and sent["to_id"] == "bob"
    assert post["channel_id"] == work
    events = await tool_events(hub)
    assert [(e["actor"], e["tool"], e["ok"]) for e in events] == [
        ("alice", "send_message", True),
        ("alice", "post", True),
    ]
    assert all("body" not in e and "content" not in e for e in events)


async def test_the_model_is_offered_the_mcp_tools_with_the_same_definitions(
    hub: Hub,
    operator: Principal,
    alice: AgentHandle,
    model: FakeModelServer,
    kind: str,
) -> None:
    model.script(FakeReply(text="Nothing to do."))
    await wake(hub, operator, alice, "Look around.")

    offered = model.requests[0]["tools"]
    # Every tool of every profile: some (the worker tools) are in a profile of their own.
    listed = {t.name: t for p in PROFILES for t in await build_mcp(hub, p).list_tools()}
    expected = [name for name in listed if name not in NOT_IN_A_TURN] + ["write_file"]
    assert tool_names(kind, model.requests[0]) == expected
    for tool in offered:
        spec = tool["function"] if kind == "openai" else tool
        schema = spec["parameters"] if kind == "openai" else spec["input_schema"]
        if spec["name"] == "write_file":
            continue
        mcp_tool = listed[spec["name"]]
        assert spec["description"] == mcp_tool.description
        assert schema == mcp_tool.input_schema


async def test_write_file_inside_the_workspace_and_refused_outside(
    hub: Hub,
    operator: Principal,
    alice: AgentHandle,
    model: FakeModelServer,
    kind: str,
    tmp_path: Path,
) -> None:
    model.script(
        FakeReply(
            text="",
            calls=[
                FakeCall("write_file", {"path": "notes/summary.md", "content": "# Summary\n"}),
                FakeCall("write_file", {"path": "../escape.md", "content": "nope"}),
            ],
        ),
        FakeReply(text="Wrote the summary."),
    )

    task = await wake(hub, operator, alice, "Write the summary.")

    assert task.end_reason != "failed", task.error
    written = tmp_path / "ws-alice" / "notes" / "summary.md"
    assert written.read_text() == "# Summary\n"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert not (tmp_path / "escape.md").exists()
    inside, outside = tool_results(kind, model.requests[1])
    assert json.loads(inside)["path"] == str(written.resolve())
    assert outside.startswith("file_outside_workspace: ")
    events = await tool_events(hub)
    assert [(e["tool"], e["ok"], e.get("code")) for e in events] == [
        ("write_file", True, None),
        ("write_file", False, "file_outside_workspace"),
    ]


async def test_a_refusal_by_the_service_reaches_the_model_with_its_code(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    alice: AgentHandle,
    model: FakeModelServer,
    kind: str,
) -> None:
    bob = await make_agent("bob")
    model.script(
        FakeReply(
            text="",
            calls=[FakeCall("post", {"channel_id": bob.principal.work_channel_id, "content": "x"})],
        ),
        FakeReply(text="I may not post there."),
    )

    task = await wake(hub, operator, alice, "Post in bob's channel.")

    assert task.end_reason != "failed", task.error
    (result,) = tool_results(kind, model.requests[1])
    assert result.startswith("not_a_member: ")
    assert bob.principal.work_channel_id is not None
    bobs = await hub.channels.messages(operator, bob.principal.work_channel_id)
    assert all(m.sender_id != "alice" for m in bobs)
    events = await tool_events(hub)
    assert [(e["tool"], e["ok"], e.get("code")) for e in events] == [
        ("post", False, "not_a_member")
    ]


async def test_a_model_that_calls_tools_forever_fails_the_turn(
    hub: Hub,
    operator: Principal,
    alice: AgentHandle,
    model: FakeModelServer,
) -> None:
    hub.settings.max_tool_rounds = 2
    model.default = FakeReply(text="", calls=[FakeCall("whoami")])

    task = await wake(hub, operator, alice, "Loop.")

    assert task.end_reason == "failed"
    assert task.error is not None and task.error.startswith("runtime_tool_rounds: ")
    assert "2 rounds" in task.error
    # Two rounds of calls ran, then the third request's calls were refused without running.
    assert len(model.requests) == 3
    events = await tool_events(hub)
    assert [e["tool"] for e in events] == ["whoami", "whoami"]


async def test_tools_not_meant_for_a_turn_are_refused(
    hub: Hub,
    operator: Principal,
    alice: AgentHandle,
    model: FakeModelServer,
    kind: str,
) -> None:
    model.script(
        FakeReply(text="", calls=[FakeCall("wait_for_turn", {"timeout_s": 1})]),
        FakeReply(text="Answering with text instead."),
    )

    task = await wake(hub, operator, alice, "Hello.")

    assert task.end_reason != "failed", task.error
    (result,) = tool_results(kind, model.requests[1])
    assert result.startswith("unknown_tool: ")
