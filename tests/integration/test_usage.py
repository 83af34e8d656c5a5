"""Token and cost accounting: every turn whose runtime reports usage is recorded with its model
and where it ran, and totalled by agent, model, day, worker tree, discussion and meeting over
REST and in ``/metrics``; a spent budget refuses the next turn with ``budget_exhausted``.
Providers are the real openai and anthropic SDKs against the local fake model servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.workers.records import StartSpec
from tests.conftest import AgentHandle, MakeAgent
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.model_server import FakeCall, FakeModelServer, FakeReply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.discussion_support import invocations
from tests.integration.meeting_support import room_with
from tests.integration.test_metrics import samples

SERVERS: dict[str, type[FakeModelServer]] = {
    "openai": FakeOpenAIServer,
    "anthropic": FakeAnthropicServer,
}
# What the fake servers report for every call.
INPUT, OUTPUT = 42, 7


@pytest.fixture(params=sorted(SERVERS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def model(kind: str) -> AsyncIterator[FakeModelServer]:
    async with SERVERS[kind]() as fake:
        yield fake


def runtime_of(kind: str, model: FakeModelServer, name: str = "fake-model") -> dict[str, Any]:
    return {
        "kind": kind,
        "model": name,
        "base_url": model.base_url,  # type: ignore[attr-defined]
        "api_key": "test-key",
        "max_retries": 0,
    }


async def wake(hub: Hub, operator: Principal, agent: AgentHandle, text: str) -> Any:
    channel = agent.principal.work_channel_id
    assert channel is not None
    posted = await hub.channels.post(operator, channel, text)
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    return await hub.tasks.get(operator, posted.task_id)


async def usage(client: Any, **params: str) -> dict[str, Any]:
    response = await client.get("/v1/usage", params=params)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def by_key(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["key"]: g for g in report["groups"]}


async def test_a_provider_turn_is_recorded_and_totalled_by_agent_model_and_day(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeModelServer,
    kind: str,
    api: Any,
) -> None:
    alice = await make_agent("alice", runtime=runtime_of(kind, model))
    bob = await make_agent("bob", runtime=runtime_of(kind, model, "other-model"))
    await wake(hub, operator, alice, "first")
    await wake(hub, operator, alice, "second")
    await wake(hub, operator, bob, "one")
    assert hub.operator_token is not None
    boss = api(hub.operator_token)

    agents = by_key(await usage(boss, by="agent"))
    assert agents["alice"]["turns"] == 2
    assert agents["alice"]["input_tokens"] == 2 * INPUT
    assert agents["alice"]["output_tokens"] == 2 * OUTPUT
    assert agents["alice"]["tokens_total"] == 2 * (INPUT + OUTPUT)
    assert agents["bob"]["turns"] == 1
    # The model is the one the provider says answered (the fake echoes the requested one).
    models = by_key(await usage(boss, by="model"))
    assert models["fake-model"]["turns"] == 2 and models["other-model"]["turns"] == 1
    day = hub.ctx.clock.now().date().isoformat()
    assert by_key(await usage(boss, by="day"))[day]["turns"] == 3
    whole = await usage(boss)
    assert whole["total"]["turns"] == 3 and whole["groups"] == []
    # Each record is the invocation's: one per call, under the call's id.
    task = await wake(hub, operator, bob, "two")
    calls = await invocations(hub, task.id)
    async with hub.store.read() as tx:
        record = await tx.get("turn_usage", calls[0].id)
    assert record is not None and record.agent_id == "bob" and record.model == "other-model"
    assert record.runtime == kind and record.channel_id == bob.principal.work_channel_id

    # An agent reads its own usage only.
    mine = await usage(api(alice.token), by="agent")
    assert list(by_key(mine)) == ["alice"]
    assert mine["total"]["turns"] == 2


async def test_metrics_count_tokens_by_agent_and_model(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeModelServer,
    kind: str,
    api: Any,
) -> None:
    alice = await make_agent("alice", runtime=runtime_of(kind, model))
    await wake(hub, operator, alice, "go")
    assert hub.operator_token is not None
    page = (await api(hub.operator_token).get("/metrics")).text
    seen = samples(page)
    labels = (("agent", "alice"), ("model", "fake-model"))
    assert seen[("parley_tokens_total", (*labels[:1], ("kind", "input"), labels[1]))] == INPUT
    assert seen[("parley_tokens_total", (*labels[:1], ("kind", "output"), labels[1]))] == OUTPUT
    assert seen[("parley_usage_turns_total", labels)] == 1


async def test_totals_of_a_worker_tree_a_discussion_and_a_meeting(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeModelServer,
    kind: str,
    api: Any,
    tmp_path: Path,
) -> None:
    def reply(body: dict[str, Any]) -> FakeReply:
        text = str(body)
        if "[Meeting]" in text:
            return FakeReply(text="One queue is enough.")
        if "minutes" in text.lower() and "The meeting on" in text:
            return FakeReply(text="My minutes: we chose one queue.")
        return FakeReply(text="Agreed. [[DISCUSSION_DONE]]")

    model.responder = reply
    workspace = tmp_path / "ws"
    workspace.mkdir()
    lead = await make_agent("lead", runtime=runtime_of(kind, model), workspace=str(workspace))
    await make_agent("rev", runtime=runtime_of(kind, model), accepts_channels_from=["lead"])
    assert hub.operator_token is not None
    boss = api(hub.operator_token)

    # A worker tree: its root's turn, counted under the root whichever worker is named.
    worker = await hub.workers.start(operator, StartSpec(agent_id="rev", prompt="check it"))
    await hub.tasks.wait_idle()
    tree = await usage(boss, worker=worker.id)
    assert tree["total"]["turns"] == 1
    assert by_key(await usage(boss, by="tree"))[worker.id]["turns"] == 1

    # A discussion: both members' turns, under the discussion's channel.
    assert lead.principal.work_channel_id is not None
    channel = await hub.discussions.create_private_channel(
        lead.principal, "design", ["rev"], lead.principal.work_channel_id, "Pick a queue"
    )
    await hub.tasks.wait_idle()
    talk = await usage(boss, discussion=channel.id, by="agent")
    assert set(by_key(talk)) == {"lead", "rev"}
    assert talk["total"]["turns"] >= 2
    assert by_key(await usage(boss, by="discussion"))[channel.id]["turns"] == talk["total"]["turns"]

    # A meeting: its speeches (and minutes) under the meeting.
    room = await room_with(hub, operator, ["lead", "rev"], max_rounds=1)
    asked_before = len(model.requests)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="queues"))
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    speeches = await hub.meetings.speeches(operator, meeting.id)
    spoke = [s for s in speeches if s.outcome == "accepted"]
    assert spoke
    met = await usage(boss, meeting=meeting.id)
    # Every call the meeting made is booked, speeches and each draft of minutes alike (a
    # meeting's calls offer no tools; the work turns the members go back to do).
    calls = [r for r in model.requests[asked_before:] if "tools" not in r]
    assert met["total"]["turns"] == len(calls) > len(spoke)
    assert met["total"]["input_tokens"] == met["total"]["turns"] * INPUT
    assert by_key(await usage(boss, by="meeting"))[meeting.id]["turns"] == met["total"]["turns"]


async def test_a_spent_agent_budget_refuses_the_next_turn(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeModelServer,
    kind: str,
    api: Any,
) -> None:
    alice = await make_agent("alice", runtime=runtime_of(kind, model))
    assert hub.operator_token is not None
    boss = api(hub.operator_token)
    # Only the operator sets budgets.
    refused = await api(alice.token).put(
        "/v1/usage/budgets", json={"scope": "agent", "key": "alice", "max_tokens": 10}
    )
    assert refused.status_code == 403
    put = await boss.put(
        "/v1/usage/budgets", json={"scope": "agent", "key": "alice", "max_tokens": 40}
    )
    assert put.status_code == 200, put.text
    first = await wake(hub, operator, alice, "first")
    assert first.end_reason == "replied"
    second = await wake(hub, operator, alice, "second")
    assert second.end_reason == "failed" and second.failed_member == "alice"
    assert (second.error or "").startswith("budget_exhausted")
    calls = await invocations(hub, second.id)
    assert [(c.outcome, c.reason) for c in calls] == [("failed", "budget_exhausted")]
    assert len(model.requests) == 1  # the provider was not asked again
    listed = (await boss.get("/v1/usage/budgets")).json()
    assert listed[0]["exhausted"] is True
    assert listed[0]["spent"]["tokens_total"] == INPUT + OUTPUT
    # Raised, the budget lets turns run again.
    await boss.put("/v1/usage/budgets", json={"scope": "agent", "key": "alice", "max_tokens": 500})
    third = await wake(hub, operator, alice, "third")
    assert third.end_reason == "replied"
    cleared = await boss.delete("/v1/usage/budgets/agent/alice")
    assert cleared.json() == {"removed": True}


async def test_a_spent_tree_budget_refuses_the_trees_turns(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeModelServer,
    kind: str,
    api: Any,
) -> None:
    await make_agent("alice", runtime=runtime_of(kind, model))
    worker = await hub.workers.start(operator, StartSpec(agent_id="alice", prompt="start"))
    await hub.tasks.wait_idle()
    assert hub.operator_token is not None
    boss = api(hub.operator_token)
    put = await boss.put(
        "/v1/usage/budgets",
        json={"scope": "tree", "key": worker.id, "max_cost_usd": 1.0, "max_tokens": 40},
    )
    assert put.status_code == 200, put.text
    assert put.json()["key"] == worker.id
    posted = await hub.channels.post(operator, worker.channel_id, "more")
    await hub.tasks.wait_idle()
    assert posted.task_id is not None
    task = await hub.tasks.get(operator, posted.task_id)
    assert task.end_reason == "failed"
    assert (task.error or "").startswith("budget_exhausted")
    # A spawn into the spent tree is refused at once, over the API too.
    refused = await boss.post(f"/v1/workers/{worker.id}/spawn", json={"prompt": "help"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "budget_exhausted"


async def test_a_turn_that_fails_after_calling_the_model_is_booked_what_it_used(
    hub: Hub, operator: Principal, make_agent: MakeAgent, model: FakeModelServer, kind: str
) -> None:
    alice = await make_agent("alice", runtime=runtime_of(kind, model))
    # One round of tool calls, then a reply cut by the token limit: the turn fails, and both
    # calls to the model were paid for.
    model.script(
        FakeReply(text="", calls=[FakeCall("list_agents", {})]),
        FakeReply(text="The agents are", stop="length" if kind == "openai" else "max_tokens"),
    )
    task = await wake(hub, operator, alice, "Who is here?")
    assert task.end_reason == "failed"
    async with hub.store.read() as tx:
        u = tx.table("turn_usage").c
        booked = await tx.select("turn_usage", u.agent_id == "alice")
    assert [(r.input_tokens, r.output_tokens) for r in booked] == [(2 * INPUT, 2 * OUTPUT)]
    [call] = await invocations(hub, task.id)
    assert call.outcome == "failed" and booked[0].id == call.id


async def test_a_meetings_failed_speeches_are_booked_too(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    model: FakeModelServer,
    kind: str,
    api: Any,
) -> None:
    cut = "length" if kind == "openai" else "max_tokens"

    def reply(body: dict[str, Any]) -> FakeReply:
        if "[Meeting]" in str(body):
            return FakeReply(text="One queue is", stop=cut)  # every speech cut by the limit
        return FakeReply(text="My minutes: nothing was decided.")

    model.responder = reply
    await make_agent("lead", runtime=runtime_of(kind, model))
    await make_agent("rev", runtime=runtime_of(kind, model))
    room = await room_with(hub, operator, ["lead", "rev"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="queues"))
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    speeches = await hub.meetings.speeches(operator, meeting.id)
    assert speeches and all(s.outcome == "failed" for s in speeches)
    assert hub.operator_token is not None
    met = await usage(api(hub.operator_token), meeting=meeting.id)
    calls = [r for r in model.requests if "tools" not in r]
    assert met["total"]["turns"] == len(calls) >= len(speeches)
