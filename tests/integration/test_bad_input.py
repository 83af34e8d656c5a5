"""Q6 regressions: bad input the REST fuzzing found. Each is refused with a core error or a
validation error of our JSON shape, the same way on SQLite and PostgreSQL (which used to answer
503 or 500 where SQLite accepted), and nothing of a refused request is written."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.core import discussion as d
from parley.core import workers as wk
from parley.core.channels import Invocation
from parley.core.errors import InvalidRequest
from parley.core.identity import Principal
from parley.core.limits import MAX_SEQ
from parley.core.mail import InboxFilter
from parley.core.runtime import Turn, TurnResult
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.mail_support import all_messages, send
from tests.integration.test_mail_stream import serving

NUL = "a\x00b"
READ_TIMEOUT_S = 20.0


@dataclass
class Scene:
    """A hub with objects to aim bad input at."""

    alice: AgentHandle
    bob: AgentHandle
    group: str
    mail: str
    turn: str


@pytest.fixture
async def scene(hub: Hub, operator: Principal, make_agent: MakeAgent) -> Scene:
    alice = await make_agent("alice", runtime={"kind": "remote"})
    bob = await make_agent("bob")
    group = await hub.channels.create(operator, ChannelSpec(name="g", members=["alice"]))
    await hub.channels.post(operator, group.id, "what do you think?")
    turn = await hub.turns.next(alice.principal, timeout_s=15)
    assert turn is not None
    mail = await send(hub, alice.principal, "bob", subject="hello")
    return Scene(alice, bob, group.id, mail.id, turn.id)


async def stored_counts(hub: Hub) -> dict[str, int]:
    """How many rows each table holds, to show a refusal wrote nothing."""
    async with hub.store.read() as tx:
        return {
            table: len(await tx.select(table))
            for table in ("principals", "messages", "channels", "channel_messages", "events")
        }


def refusal(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    body: dict[str, Any] = response.json()
    assert isinstance(body["message"], str) and isinstance(body["details"], dict)
    return body


# -- NUL characters: PostgreSQL text cannot hold them ------------------------------------------
MAIL = {"to": "bob", "kind": "task"}
AGENT = {"id": "carol"}
DISCUSSION = {"name": "d", "callbackChannelId": "{group}"}
# (caller, path, the rest of a valid body, the field given NUL text, its value)
BODIES_WITH_NUL = [
    ("operator", "/v1/mail", MAIL, "body", NUL),
    ("operator", "/v1/mail", MAIL, "subject", NUL),
    ("operator", "/v1/mail", {"kind": "task"}, "to", NUL),
    ("operator", "/v1/mail", MAIL, "cc", [NUL]),
    ("operator", "/v1/mail", MAIL, "labels", [NUL]),
    ("operator", "/v1/mail", MAIL, "correlation_id", NUL),
    ("operator", "/v1/mail", MAIL, "idempotency_key", NUL),
    ("operator", "/v1/mail", MAIL, "payload", {"k": NUL}),
    ("operator", "/v1/channels", {}, "name", NUL),
    ("operator", "/v1/channels", {"name": "n"}, "members", [NUL]),
    ("operator", "/v1/channels/{group}/messages", {}, "content", NUL),
    ("operator", "/v1/im/sessions/{group}/messages", {"content": "hi"}, "reply_to", NUL),
    ("operator", "/v1/channels/{group}/close", {}, "reason", NUL),
    ("alice", "/v1/channels/private", {}, "name", NUL),
    ("alice", "/v1/channels/private", DISCUSSION, "discussGuide", NUL),
    ("alice", "/v1/turns/{turn}/speak", {}, "text", NUL),
    ("bob", "/v1/mail/{mail}/status", {"status": "closed"}, "label", NUL),
    ("bob", "/v1/mail/{mail}/archive", {}, "label", NUL),
    ("operator", "/v1/agents", AGENT, "display_name", NUL),
    ("operator", "/v1/agents", AGENT, "persona", NUL),
    ("operator", "/v1/agents", AGENT, "workspace", NUL),
    ("operator", "/v1/agents", AGENT, "runtime", {"kind": "none", "k": NUL}),
    ("operator", "/v1/humans", {"id": "dora"}, "display_name", NUL),
]


@pytest.mark.parametrize(("who", "path", "rest", "field", "value"), BODIES_WITH_NUL)
async def test_text_with_a_nul_character_is_refused_and_nothing_is_written(
    hub: Hub,
    api: Any,
    scene: Scene,
    who: str,
    path: str,
    rest: dict[str, Any],
    field: str,
    value: Any,
) -> None:
    tokens = {"operator": hub.operator_token, "alice": scene.alice.token, "bob": scene.bob.token}
    where = {"group": scene.group, "mail": scene.mail, "turn": scene.turn}
    body = {k: v.format(**where) for k, v in rest.items()} | {field: value}
    before = await stored_counts(hub)
    r = await api(tokens[who]).post(path.format(**where), json=body)
    error = refusal(r, 422, "validation_error")
    assert error["details"]["errors"][0]["loc"][:2] == ["body", field]
    assert "NUL character" in error["message"]
    assert await stored_counts(hub) == before


@pytest.mark.parametrize(
    "path",
    [
        "/v1/agents/a%00b",
        "/v1/mail/a%00b",
        "/v1/channels/a%00b/messages",
        "/v1/tasks/a%00b",
        "/v1/agents/bob/inbox?kind=a%00b",
        "/v1/agents/bob/inbox?from=a%00b",
        "/v1/agents/bob/inbox?status=a%00b",
        "/v1/events?type=a%00b",
        "/v1/events?after=a%00b&subject=s",
    ],
)
async def test_a_nul_character_in_a_path_or_query_is_refused(
    hub: Hub, api: Any, scene: Scene, path: str
) -> None:
    r = await api(hub.operator_token).get(path)
    error = refusal(r, 400, "invalid_text")
    assert "NUL character" in error["message"] and "a\\x00b" in error["message"]
    r = await api(scene.alice.token).post("/v1/turns/a%00b/no_reply")
    refusal(r, 400, "invalid_text")


async def test_the_service_refuses_nul_text_from_any_surface(
    hub: Hub, operator: Principal, scene: Scene
) -> None:
    """MCP and the CLI reach the same service methods with plain strings."""
    before = await stored_counts(hub)
    calls = [
        hub.channels.post(operator, scene.group, NUL),
        hub.turns.speak(scene.alice.principal, scene.turn, NUL),
        hub.discussions.force_close(operator, scene.group, NUL),
        hub.mail.update_status(scene.bob.principal, scene.mail, "closed", label=NUL),
        hub.mail.inbox(operator, "bob", InboxFilter(kind=NUL)),
        hub.discussions.create_private_channel(scene.alice.principal, NUL, []),
    ]
    for call in calls:
        with pytest.raises(InvalidRequest) as refused:
            await call
        assert refused.value.code == "invalid_text"
        assert "'a\\x00b'" in refused.value.message
    assert await stored_counts(hub) == before


async def test_the_service_refuses_reasons_longer_than_rest_allows(
    hub: Hub, operator: Principal, scene: Scene
) -> None:
    """The web UI, MCP and the CLI reach these with plain strings: the service holds REST's
    length limits, with REST's code, and stores nothing cut short."""
    before = await stored_counts(hub)
    calls = [
        hub.discussions.force_close(operator, scene.group, "r" * (d.CLOSE_REASON_MAX_CHARS + 1)),
        hub.workers.cancel(operator, "w-nobody", reason="r" * (wk.CANCEL_REASON_MAX_CHARS + 1)),
    ]
    for call in calls:
        with pytest.raises(InvalidRequest) as refused:
            await call
        assert refused.value.code == "validation_error"
    assert await stored_counts(hub) == before


# -- numbers and times no store can hold ---------------------------------------------------------
@pytest.mark.parametrize("after_seq", [MAX_SEQ + 1, 2**63, 10**30])
async def test_a_position_past_32_bits_is_refused(
    hub: Hub, api: Any, operator: Principal, scene: Scene, after_seq: int
) -> None:
    client = api(hub.operator_token)
    for path in (
        "/v1/agents/bob/inbox",
        f"/v1/channels/{scene.group}/messages",
        f"/v1/im/sessions/{scene.group}/messages",
    ):
        error = refusal(
            await client.get(path, params={"after_seq": after_seq}), 422, "validation_error"
        )
        assert "2147483647" in error["message"]
        assert (await client.get(path, params={"after_seq": MAX_SEQ})).json() == []
    with pytest.raises(InvalidRequest) as refused:
        await hub.channels.messages(operator, scene.group, after_seq=after_seq)
    assert refused.value.code == "invalid_seq"


@pytest.mark.parametrize("since", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
async def test_a_since_at_the_edge_of_the_calendar_is_refused(
    hub: Hub, api: Any, scene: Scene, since: str
) -> None:
    r = await api(hub.operator_token).get("/v1/agents/bob/inbox", params={"since": since})
    assert repr(since) in refusal(r, 400, "invalid_since")["message"]


async def test_a_correlation_id_must_fit_the_trace_id_of_its_event(
    hub: Hub, api: Any, scene: Scene
) -> None:
    client = api(scene.alice.token)
    before = await stored_counts(hub)
    r = await client.post(
        "/v1/mail", json={"to": "bob", "kind": "task", "correlation_id": "c" * 65}
    )
    assert refusal(r, 422, "validation_error")["details"]["errors"][0]["loc"] == [
        "body",
        "correlation_id",
    ]
    assert await stored_counts(hub) == before
    r = await client.post(
        "/v1/mail", json={"to": "bob", "kind": "task", "correlation_id": "c" * 64}
    )
    assert r.status_code == 201
    sent = await api(hub.operator_token).get("/v1/events", params={"type": "mail.sent"})
    assert sent.json()[-1]["trace_id"] == "c" * 64


# -- JSON a store cannot hold ------------------------------------------------------------------
DEEP = "[" * 40 + "]" * 40
RAW_BODIES = [
    ("/v1/mail", '{"to": "bob", "kind": "task", "payload": {"x": NaN}}', "finite"),
    ("/v1/mail", '{"to": "bob", "kind": "task", "payload": {"x": -Infinity}}', "finite"),
    ("/v1/mail", '{"to": "bob", "kind": "task", "payload": {"x": "\\ud800"}}', "lone surrogate"),
    ("/v1/mail", '{"to": "bob", "kind": "task", "payload": {"\\u0000": 1}}', "NUL character"),
    ("/v1/mail", '{"to": "bob", "kind": "task", "payload": {"x": ' + DEEP + "}}", "deeper"),
    ("/v1/mail", '{"to": "\\ud800", "kind": "task"}', "lone surrogate"),
    ("/v1/agents", '{"id": "carol", "runtime": {"kind": "none", "t": NaN}}', "finite"),
]


@pytest.mark.parametrize(("path", "raw", "why"), RAW_BODIES)
async def test_json_a_store_cannot_hold_is_refused_and_nothing_is_written(
    hub: Hub, api: Any, scene: Scene, path: str, raw: str, why: str
) -> None:
    before = await stored_counts(hub)
    r = await api(hub.operator_token).post(
        path, content=raw, headers={"content-type": "application/json"}
    )
    assert why in refusal(r, 422, "validation_error")["message"]
    assert await stored_counts(hub) == before


async def test_json_nested_up_to_the_limit_is_kept(hub: Hub, scene: Scene) -> None:
    nested: Any = []
    for _ in range(30):
        nested = [nested]
    msg = await send(hub, scene.alice.principal, "bob", payload={"x": nested, "n": 1.5e300})
    [stored] = [m for m in await all_messages(hub) if m.id == msg.id]
    assert stored.payload == {"x": nested, "n": 1.5e300}


# -- mailroom import -----------------------------------------------------------------------------
def mailroom_file(msg_id: str, *, created: str = "2026-01-01T00:00", extra: str = "") -> str:
    return (
        f"---\nid: {msg_id}\nkind: task\nstatus: pending\nfrom: alice\nto: bob\n"
        f"created: {created}\n{extra}---\nbody\n"
    )


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (mailroom_file("m1", extra="ttl: 99999999999999999999\n"), "'ttl'"),
        (mailroom_file("m1", extra="ttl: 3000000000\n"), "'ttl'"),
        (mailroom_file("m1", extra="ttl: " + "9" * 5000 + "\n"), "'ttl'"),
        (mailroom_file("m1", created="0001-01-01T00:00+01:00"), "is not a time"),
        (mailroom_file("m1", extra="closed: '9999-12-31T23:59-14:00'\n"), "is not a time"),
        (mailroom_file("m1", created="9999-12-31T23:00"), "beyond year 9999"),
        (mailroom_file("m1").replace("body", "bo\x00dy"), "NUL character"),
        (mailroom_file("m1", extra='subject: "a\\0b"\n'), "NUL character"),
        (mailroom_file('"m\\0"'), "NUL character"),
        (mailroom_file("m1", extra="payload: '{\"x\": NaN}'\n"), "finite"),
    ],
)
async def test_a_mailroom_file_a_store_cannot_hold_refuses_the_whole_import(
    hub: Hub, api: Any, scene: Scene, bad: str, why: str
) -> None:
    before = await stored_counts(hub)
    files = {"inbox/bob/good.md": mailroom_file("good"), "inbox/bob/bad.md": bad}
    r = await api(hub.operator_token).post("/v1/mailroom/import", json={"files": files})
    error = refusal(r, 400, "invalid_mailroom_file")
    assert why in error["message"], error["message"]
    assert await stored_counts(hub) == before


# -- the summary file of a discussion ------------------------------------------------------------
async def test_a_summary_path_the_file_system_cannot_name_is_refused(
    hub: Hub, api: Any, make_agent: MakeAgent, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    lead = await make_agent("lead", workspace=str(workspace), runtime={"kind": "remote"})
    await make_agent("peer", runtime={"kind": "remote"}, accepts_channels_from=["lead"])
    client = api(lead.token)
    opened = await client.post(
        "/v1/channels/private",
        json={
            "name": "d",
            "members": ["peer"],
            "callbackChannelId": lead.principal.work_channel_id,
            "discussGuide": "decide",
        },
    )
    assert opened.status_code == 201, opened.text
    channel = opened.json()["id"]
    r = await client.post(f"/v1/channels/{channel}/callback", json={"summaryPath": "a" * 300})
    assert "File name too long" in refusal(r, 400, "invalid_summary_path")["message"]
    still = (await client.get(f"/v1/channels/{channel}")).json()
    assert (still["status"], still["metadata"]["status"]) == ("active", "active")


# -- Last-Event-ID -------------------------------------------------------------------------------
async def first_event(response: httpx.Response) -> tuple[str, str]:
    """The id and type of the first event of an event stream."""
    event: dict[str, str] = {}
    async with asyncio.timeout(READ_TIMEOUT_S):
        async for line in response.aiter_lines():
            if line == "" and "event" in event:
                return event["id"], event["event"]
            if line and not line.startswith(":"):
                key, _, value = line.partition(":")
                event[key] = value.removeprefix(" ")
    raise AssertionError("the stream ended before its first event")


@pytest.mark.parametrize("last_id", ["\u00b2", "99999999999999999999", "9" * 5000])
async def test_a_last_event_id_that_is_no_position_replays_the_stream(
    hub: Hub, operator: Principal, scene: Scene, last_id: str
) -> None:
    assert hub.operator_token is not None
    headers = {"Authorization": f"Bearer {hub.operator_token}"}
    # As the query's last_id: an HTTP client sends only ASCII in a Last-Event-ID header.
    params = {"last_id": last_id}
    async with serving(hub) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        for path, first in (
            ("/v1/agents/bob/inbox/stream", ("1", "mail")),
            (f"/v1/channels/{scene.group}/stream", ("1", "message")),
        ):
            async with client.stream("GET", path, headers=headers, params=params) as response:
                assert response.status_code == 200
                assert await first_event(response) == first


# -- model routes --------------------------------------------------------------------------------
class LongRouteRuntime:
    """Answers every turn through a route longer than the trace column."""

    kind = "scripted"

    async def respond(self, turn: Turn) -> TurnResult:
        return TurnResult(text="done", model_route="custom:" + "r" * 400)

    async def aclose(self) -> None:
        return None


async def test_a_long_model_route_is_cut_in_the_trace_not_lost_with_the_task(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    agent = await make_agent("wordy", runtime={"kind": "scripted"})
    runtimes.set("wordy", LongRouteRuntime())
    assert agent.principal.work_channel_id is not None
    posted = await hub.channels.post(operator, agent.principal.work_channel_id, "go")
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    task = await hub.tasks.get(operator, posted.task_id)
    assert (task.status, task.end_reason, task.error) == ("finished", "replied", None)
    [trace] = await hub.tasks.invocations(operator, posted.task_id)
    assert trace.outcome == "accepted"
    assert trace.model_route.startswith("custom:rrr") and trace.model_route.endswith("…")
    assert len(trace.model_route) == 300
    assert Invocation.model_validate(trace.model_dump()).model_route == trace.model_route
