"""Runtime secrets of one agent reach nobody else (Q8): not through any REST route, MCP tool,
event stream, event-log payload, log line or mailroom export.

An agent's runtime config carries secrets in every shape the hub knows (a value under ``env``,
a nested secret-like key, a key echoed back by its provider, URL userinfo in ``base_url``); the
agents then fail turns with them, which drives the route and the provider's error into tasks,
invocations, events and logs. Another agent then reads everything it can.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.service.workers.records import ResultSpec, SpawnSpec, StartSpec
from parley.surfaces.logs import install_redaction
from parley.surfaces.rest.app import create_app
from tests.conftest import AgentHandle, MakeAgent
from tests.fakes.model_server import FakeReply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.mail_support import send
from tests.integration.mcp_support import data, http_client, serving

READ_TIMEOUT_S = 20.0
STREAM_ROUTES = {
    "/v1/agents/{owner}/inbox/stream",
    "/v1/channels/{channel_id}/stream",
    "/v1/events/stream",
    "/v1/rooms/meetings/{meeting_id}/stream",
    "/v1/workers/{worker_id}/stream",
}
# MCP tools that only read; the others change state and are exercised elsewhere. A new tool
# must be put in one of the two sets, so that a reading tool cannot slip past this test.
READ_TOOLS = {
    "whoami",
    "check_inbox",
    "read_message",
    "thread",
    "wait_for_mail",
    "list_channels",
    "read_channel",
    "list_invitations",
    "wait_for_turn",
    "meeting_status",
    "topology",
    "worker_status",
    "read_artifact",
}
WRITE_TOOLS = {
    "send_message",
    "update_message",
    "post",
    "create_private_channel",
    "discuss_callback",
    "invite_to_channel",
    "accept_invitation",
    "decline_invitation",
    "speak",
    "no_reply",
    "join_room",
    "leave_room",
    "convene",
    "stop_meeting",
    "post_brief",
    "mark_done",
    "spawn_child",
    "report_result",
    "cancel_worker",
    "takeover",
    "heartbeat",
}


class Secrets:
    """Unique values planted in runtime configs; none may ever be read by another agent."""

    def __init__(self) -> None:
        tag = new_ulid().lower()
        self.env = f"envsecret{tag}"
        self.nested = f"nestedsecret{tag}"
        self.api_key = f"keysecret{tag}"
        self.userinfo = f"urlsecret{tag}"

    def all(self) -> list[str]:
        return [self.env, self.nested, self.api_key, self.userinfo]

    def assert_absent(self, text: str, where: str) -> None:
        for secret in self.all():
            assert secret not in text, f"a runtime secret leaked through {where}: {text[:2000]}"


@pytest.fixture
async def provider() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def secrets() -> Secrets:
    return Secrets()


async def plant(
    make_agent: MakeAgent, provider: FakeOpenAIServer, secrets: Secrets
) -> list[AgentHandle]:
    """Agents whose runtimes hold the secrets and whose turns fail with them."""
    # The provider refuses the key and echoes it back, as real providers do.
    provider.default = FakeReply(
        status=401, error_message=f"Incorrect API key provided: {secrets.api_key}"
    )
    base_url = provider.base_url.replace("http://", f"http://svcuser:{secrets.userinfo}@")
    http_agent = await make_agent(
        "victim-http",
        runtime={
            "kind": "openai",
            "model": "fake-model",
            "base_url": base_url,
            "api_key": secrets.api_key,
            "max_retries": 0,
        },
    )
    # A command that prints its environment's key to stderr and fails.
    script = (
        "import os, sys; sys.stderr.write('key ' + os.environ['ANTHROPIC_API_KEY']); sys.exit(3)"
    )
    command_agent = await make_agent(
        "victim-cmd",
        runtime={
            "kind": "command",
            "argv": [sys.executable, "-c", script],
            "env": {"ANTHROPIC_API_KEY": secrets.env},
        },
    )
    nested_agent = await make_agent(
        "victim-nested",
        runtime={
            "kind": "remote",
            "gateway": {
                "url": f"https://relay:{secrets.userinfo}@relay.invalid/",
                "headers": {"X-Api-Key": secrets.nested},
            },
        },
    )
    return [http_agent, command_agent, nested_agent]


async def fail_turns(hub: Hub, operator: Principal, observer: AgentHandle) -> list[str]:
    """Channels of the observer in which each failing agent took (and failed) a turn; a
    user's message starts it (an agent's post in a group starts no discussion)."""
    channel_ids = []
    for victim in ("victim-http", "victim-cmd"):
        channel = await hub.channels.create(
            operator,
            ChannelSpec(name=f"work with {victim}", members=[victim, observer.id]),
        )
        posted = await hub.channels.post(operator, channel.id, "please review this")
        assert posted.task_id is not None
        channel_ids.append(channel.id)
    await hub.tasks.wait_idle()
    for channel_id in channel_ids:
        tasks = await hub.tasks.of_channel(operator, channel_id)
        assert [t.end_reason for t in tasks] == ["failed"], tasks
    return channel_ids


async def meet(hub: Hub, operator: Principal, observer: AgentHandle) -> tuple[str, str]:
    """A meeting of a room the observer shares with two agents whose runtimes fail with their
    secrets: their failed speeches and minutes are on record, readable by a member (the
    observer, which has no runtime, is not summoned)."""
    room = await hub.rooms.create(operator, RoomSpec(name="review room"))
    for agent_id in ("victim-http", "victim-cmd", observer.id):
        await hub.rooms.join(operator, room.id, agent_id)
    spec = ConveneSpec(topic="the secrets", members=["victim-http", "victim-cmd"])
    meeting = await hub.meetings.convene(operator, room.id, spec)
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    ended = await hub.meetings.get(operator, meeting.id)
    assert (ended.status, ended.end_reason) == ("ended", "round_cap"), ended
    return room.id, meeting.id


async def delegate(hub: Hub, operator: Principal, observer: AgentHandle) -> dict[str, list[str]]:
    """Workers of the observer with children run by the failing agents: each child fails with
    its agent's secret in the provider's error, and its failed task-result goes to the
    observer's session. One more child reports a summary over the budget (an artifact)."""
    root = await hub.workers.start(operator, StartSpec(agent_id=observer.id, prompt="lead"))
    children = [
        await hub.workers.spawn(operator, root.id, SpawnSpec(prompt="review", agent_id=victim))
        for victim in ("victim-http", "victim-cmd")
    ]
    await hub.tasks.wait_idle()
    for child in children:
        failed = await hub.workers.get(operator, child.id)
        assert failed.state == "failed" and failed.result is not None, failed
        # The provider's error travels to the parent, with the secret it echoed scrubbed.
        assert failed.result.error is not None and "***" in failed.result.error
    writer = await hub.workers.spawn(operator, root.id, SpawnSpec(prompt="write it all"))
    summary = "long " * (hub.settings.worker_result_budget_tokens * 2)
    done = await hub.workers.report_result(operator, writer.id, ResultSpec(summary=summary))
    assert done.result is not None and done.result.artifact_id is not None
    workers = [root, *children, writer]
    return {
        "worker_id": [w.id for w in workers],
        "session_id": [w.session_id for w in workers],
        "artifact_id": [done.result.artifact_id],
    }


def path_values(ids: dict[str, list[str]], template: str) -> list[str]:
    """Every way to fill ``template``'s path parameters with the hub's real ids."""
    names = [part[1:-1] for part in template.split("/") if part.startswith("{")]
    for name in names:
        assert name in ids, f"the test cannot fill {{{name}}} in {template}: add its ids"
    paths = []
    for combo in itertools.product(*(ids[name] for name in names)):
        path = template
        for name, value in zip(names, combo, strict=True):
            path = path.replace(f"{{{name}}}", value)
        paths.append(path)
    return paths


def query_for(operation: dict[str, Any]) -> dict[str, str]:
    """Query values that make a route answer at once and with the most it has."""
    wanted = {"timeout_s": "0", "include_archived": "true", "status": "all"}
    names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
    return {k: v for k, v in wanted.items() if k in names}


async def sse_events(
    client: httpx.AsyncClient, path: str, done: Callable[[list[dict[str, Any]]], bool]
) -> tuple[int, str, list[dict[str, Any]]]:
    """Open an event stream and read it until ``done`` holds for what was read; a refusal is
    returned with its body."""
    events: list[dict[str, Any]] = []
    async with client.stream("GET", path, params={"last_id": "0"}) as response:
        if response.status_code != 200:
            return response.status_code, (await response.aread()).decode(), events
        if done(events):
            return 200, "", events  # nothing to wait for
        raw: list[str] = []
        event: dict[str, str] = {}
        async with asyncio.timeout(READ_TIMEOUT_S):
            async for line in response.aiter_lines():
                raw.append(line)
                if line == "":
                    if "data" in event:
                        events.append({**event, "data": json.loads(event["data"])})
                        if done(events):
                            break
                    event = {}
                elif not line.startswith(":"):
                    field, _, value = line.partition(":")
                    event[field] = value.removeprefix(" ")
        return 200, "\n".join(raw), events


async def read_workers(
    url: str, rest: httpx.AsyncClient, token: str, ids: dict[str, list[str]], secrets: Secrets
) -> None:
    """The observer's worker streams and reading worker tools (the ``workers`` profile)."""
    for worker_id in ids["worker_id"]:
        status, text, _ = await sse_events(
            rest, f"/v1/workers/{worker_id}/stream", lambda events: len(events) > 0
        )
        assert status == 200, text
        secrets.assert_absent(text, f"the stream of worker {worker_id}")
    async with http_client(f"{url}/mcp?profile=workers", token) as mcp:
        tools = {tool.name for tool in (await mcp.list_tools()).tools}
        assert tools <= READ_TOOLS | WRITE_TOOLS, tools - READ_TOOLS - WRITE_TOOLS
        calls: list[tuple[str, dict[str, Any]]] = [("worker_status", {}), ("check_inbox", {})]
        calls += [("worker_status", {"worker_id": w}) for w in ids["worker_id"]]
        calls += [("topology", {"session_id": s}) for s in ids["session_id"]]
        calls += [("read_artifact", {"artifact_id": a}) for a in ids["artifact_id"]]
        for name, arguments in calls:
            result = await mcp.call_tool(name, arguments)
            assert not result.is_error, (name, arguments, result.content)
            text = json.dumps([c.model_dump(mode="json") for c in result.content])
            secrets.assert_absent(text, f"MCP {name}({arguments})")


async def test_a_runtime_secret_reaches_no_other_agent(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    provider: FakeOpenAIServer,
    secrets: Secrets,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # What `parley serve` installs on its handlers; pytest's capture handler is one of the
    # root logger's handlers now.
    install_redaction()
    victims = await plant(make_agent, provider, secrets)
    observer = await make_agent("observer")
    channel_ids = await fail_turns(hub, operator, observer)
    assert provider.requests, "the openai agent never called its provider"
    room_id, meeting_id = await meet(hub, operator, observer)
    worker_ids = await delegate(hub, operator, observer)
    note = await send(hub, operator, observer.id, "notice", subject="last", body="end of test")

    async with hub.store.read() as tx:
        messages = [m.id for m in await tx.select("messages")]
    tasks = [t.id for c in channel_ids for t in await hub.tasks.of_channel(operator, c)]
    visible = [c.id for c in await hub.channels.visible(operator)]
    ids = {
        "agent_id": [v.id for v in victims] + [observer.id, "operator"],
        "owner": [v.id for v in victims] + [observer.id],
        "principal_id": [v.id for v in victims] + [observer.id],
        "human_id": ["operator"],
        "channel_id": visible,
        "message_id": messages,
        "task_id": tasks,
        "room_id": [room_id],
        "meeting_id": [meeting_id],
        **worker_ids,
    }

    app = create_app(hub=hub)
    openapi = app.openapi()
    async with serving(app) as url:
        headers = {"Authorization": f"Bearer {observer.token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as rest:
            # Every GET route of the API, with every id the hub has.
            answered = set()
            for template, operations in openapi["paths"].items():
                get = operations.get("get")
                if get is None or template in STREAM_ROUTES:
                    continue
                for path in path_values(ids, template):
                    response = await rest.get(path, params=query_for(get))
                    assert response.status_code < 500, (path, response.text)
                    secrets.assert_absent(response.text, f"GET {path}")
                    if response.status_code == 200:
                        answered.add(template)
            # The reads that matter answered, so the absence above means something.
            for template in (
                "/v1/agents",
                "/v1/agents/{agent_id}",
                "/v1/channels/{channel_id}/tasks",
                "/v1/tasks/{task_id}",
                "/v1/tasks/{task_id}/invocations",
                "/v1/rooms/meetings/{meeting_id}/speeches",
                "/v1/rooms/meetings/{meeting_id}/minutes",
                "/v1/workers",
                "/v1/workers/{worker_id}",
                "/v1/workers/{worker_id}/tree",
                "/v1/sessions/{session_id}/topology",
                "/v1/artifacts/{artifact_id}",
            ):
                assert template in answered, template

            # The event streams, replayed from their start.
            sse_routes = {
                p
                for p, ops in openapi["paths"].items()
                if "text/event-stream"
                in ops.get("get", {}).get("responses", {}).get("200", {}).get("content", {})
            }
            assert sse_routes == STREAM_ROUTES, "a new event stream: read it here too"
            for owner in ids["owner"]:
                status, text, _ = await sse_events(
                    rest,
                    f"/v1/agents/{owner}/inbox/stream",
                    lambda events: any(e["data"].get("id") == note.id for e in events),
                )
                secrets.assert_absent(text, f"the inbox stream of {owner}")
                assert (status == 200) == (owner == observer.id), (owner, status)
            for channel_id in visible:
                count = len(await hub.tasks.of_channel(operator, channel_id))
                last_seq = (await hub.channels.get(operator, channel_id)).last_seq
                status, text, events = await sse_events(
                    rest,
                    f"/v1/channels/{channel_id}/stream",
                    lambda events, n=count, seq=last_seq: (
                        sum(e.get("event") == "task" for e in events) >= n
                        and seq
                        in {int(e["id"]) for e in events if e.get("event") == "message"} | {0}
                    ),
                )
                secrets.assert_absent(text, f"the stream of channel {channel_id}")
                if channel_id in channel_ids:
                    assert status == 200 and any(
                        e["data"].get("end_reason") == "failed" for e in events
                    ), text
            status, text, _ = await sse_events(rest, "/v1/events/stream", lambda _: True)
            assert status == 403, text
            secrets.assert_absent(text, "the hub's event stream")
            status, text, _ = await sse_events(
                rest, f"/v1/rooms/meetings/{meeting_id}/stream", lambda events: len(events) > 0
            )
            assert status == 200, text
            secrets.assert_absent(text, "a meeting's stream")
            await read_workers(url, rest, observer.token, ids, secrets)

        # Every reading MCP tool, with every id it takes.
        async with http_client(f"{url}/mcp", observer.token) as mcp:
            tools = {tool.name for tool in (await mcp.list_tools()).tools}
            assert tools <= READ_TOOLS | WRITE_TOOLS, tools - READ_TOOLS - WRITE_TOOLS
            calls: list[tuple[str, dict[str, Any]]] = [
                ("whoami", {}),
                ("check_inbox", {}),
                ("wait_for_mail", {"timeout_s": 0}),
                ("list_channels", {}),
                ("list_invitations", {}),
                ("wait_for_turn", {"timeout_s": 0}),
                ("meeting_status", {"recent": 20}),
                ("meeting_status", {"meeting_id": meeting_id, "recent": 20}),
            ]
            calls += [("read_message", {"id": m}) for m in messages]
            calls += [("thread", {"id": m}) for m in messages]
            calls += [("read_channel", {"channel_id": c}) for c in visible]
            for name, arguments in calls:
                if name not in tools:
                    continue
                result = await mcp.call_tool(name, arguments)
                text = json.dumps([c.model_dump(mode="json") for c in result.content])
                secrets.assert_absent(text, f"MCP {name}({arguments})")
            me = data(await mcp.call_tool("whoami", {}))
            assert me["id"] == observer.id

    # The event log, the mailroom and every log line of the run.
    async with hub.store.read() as tx:
        events = await hub.ctx.events.query(tx, limit=100_000)
    assert any(e.type == "task.finished" for e in events)
    for event in events:
        secrets.assert_absent(json.dumps(event.model_dump(mode="json")), f"event {event.type}")
    exported = await hub.mailroom.export(operator)
    secrets.assert_absent(json.dumps(exported), "the mailroom export")
    assert caplog.records
    for record in caplog.records:
        secrets.assert_absent(record.getMessage(), f"log record {record.name}")
    secrets.assert_absent(caplog.text, "the captured log")


async def test_others_see_who_an_agent_is_not_its_settings(
    hub: Hub,
    make_agent: MakeAgent,
    api: Callable[[str | None], httpx.AsyncClient],
    secrets: Secrets,
    tmp_path: Any,
) -> None:
    runtime = {
        "kind": "command",
        "argv": ["agent", "--api-key", secrets.api_key],
        "env": {"ANTHROPIC_API_KEY": secrets.env},
    }
    victim = await make_agent("victim", runtime=runtime, persona="private persona")
    other = await make_agent("other")
    assert hub.operator_token is not None

    seen = (await api(other.token).get("/v1/agents/victim")).json()
    assert seen["runtime"] == {"kind": "command"}
    assert seen["workspace"] is None and seen["persona"] is None
    listed = {a["id"]: a for a in (await api(other.token).get("/v1/agents")).json()}
    assert listed["victim"] == seen

    redacted = {
        "kind": "command",
        "argv": ["agent", "--api-key", "***"],
        "env": {"ANTHROPIC_API_KEY": "***"},
    }
    for token in (hub.operator_token, victim.token):
        full = (await api(token).get("/v1/agents/victim")).json()
        assert full["runtime"] == redacted
        assert full["persona"] == "private persona"
    me = (await api(victim.token).get("/v1/whoami")).json()
    assert me["runtime"] == redacted
