"""S3 identity and mail tools, driven in memory by the SDK's own client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
from mcp import Client

from parley.core.mail import MAIL_KINDS
from parley.service.hub import Hub
from parley.surfaces.mcp import PROFILES, build_mcp
from tests.conftest import MakeAgent
from tests.integration.mcp_support import data, refusal, waiting_on_inbox

MAIL_TOOL_NAMES = [
    "whoami",
    "send_message",
    "check_inbox",
    "read_message",
    "update_message",
    "thread",
    "wait_for_mail",
]

Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect(hub: Hub) -> Connect:
    """Open an in-memory MCP session as the holder of ``token``."""

    @asynccontextmanager
    async def open_session(token: str | None, profile: str = "default") -> AsyncIterator[Client]:
        async with Client(build_mcp(hub, profile, token=token)) as client:
            yield client

    return open_session


async def test_profiles_list_their_tools_in_order(hub: Hub, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    assert list(PROFILES["mail"]) == MAIL_TOOL_NAMES
    for profile in ("default", "mail"):
        async with Client(build_mcp(hub, profile, token=alice.token)) as client:
            listed = await client.list_tools()
        assert [t.name for t in listed.tools] == list(PROFILES[profile])
        for tool in listed.tools:
            assert tool.description, tool.name
            assert "title" not in str(tool.input_schema), tool.name


async def test_send_message_states_every_kind_and_rule_in_its_description(hub: Hub) -> None:
    async with Client(build_mcp(hub)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    manual = tools["send_message"].description or ""
    for kind in MAIL_KINDS:
        assert kind in manual
    for rule in ("refused", "blocker", "idempotency_key", "once a minute", "from your token"):
        assert rule in manual
    assert "forward" in (tools["update_message"].description or "")


async def test_whoami_is_the_token_owner(connect: Connect, make_agent: MakeAgent) -> None:
    await make_agent("alice")
    bob = await make_agent("bob", display_name="Bob the builder")
    async with connect(bob.token) as client:
        me = data(await client.call_tool("whoami", {}))
    assert me["id"] == "bob"
    assert me["kind"] == "agent"
    assert me["display_name"] == "Bob the builder"
    assert me["mail"]["unread"] == 0


async def test_mail_round_trip(connect: Connect, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with connect(alice.token) as a, connect(bob.token) as b:
        sent = data(
            await a.call_tool(
                "send_message",
                {
                    "to": "bob",
                    "kind": "task",
                    "subject": "review",
                    "body": "please review *this*",
                    "payload": {"pr": 7},
                    "labels": ["wave:2"],
                    "correlation_id": "tx-1",
                },
            )
        )
        assert sent["from_id"] == "alice"
        assert sent["recipient_id"] == "bob"
        assert sent["payload"] == {"pr": 7}

        inbox = data(await b.call_tool("check_inbox", {"unread": True}))
        assert [m["id"] for m in inbox["messages"]] == [sent["id"]]
        assert data(await b.call_tool("whoami", {}))["mail"]["unread"] == 1

        read = data(await b.call_tool("read_message", {"id": sent["id"]}))
        assert read["body"] == "please review *this*"
        assert read["status"] == "delivered"

        assert (
            data(await b.call_tool("update_message", {"id": sent["id"], "status": "read"}))[
                "status"
            ]
            == "read"
        )
        assert data(await b.call_tool("check_inbox", {"unread": True}))["messages"] == []

        reply = data(
            await b.call_tool(
                "send_message",
                {
                    "to": "alice",
                    "kind": "report",
                    "subject": "done",
                    "body": "lgtm",
                    "parent_message_id": sent["id"],
                },
            )
        )
        for client in (a, b):
            thread = data(await client.call_tool("thread", {"id": reply["id"]}))
            assert [m["id"] for m in thread["messages"]] == [sent["id"], reply["id"]]

        progress = await b.call_tool("update_message", {"id": sent["id"], "status": "in_progress"})
        assert data(progress)["status"] == "in_progress"
        closed = data(
            await b.call_tool(
                "update_message", {"id": sent["id"], "status": "close", "label": "wave-2"}
            )
        )
        assert closed["status"] == "closed"
        assert closed["archive_label"] == "wave-2"
        # Closed mail is archived: out of the inbox listing, never deleted.
        assert data(await b.call_tool("check_inbox", {}))["messages"] == []
        assert data(await b.call_tool("read_message", {"id": sent["id"]}))["status"] == "closed"


async def test_a_retry_with_the_same_idempotency_key_returns_the_original(
    connect: Connect, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    args = {"to": "bob", "kind": "notice", "subject": "s", "body": "once"}
    async with connect(alice.token) as a:
        first = data(await a.call_tool("send_message", {**args, "idempotency_key": "k1"}))
        again = data(
            await a.call_tool("send_message", {**args, "body": "twice", "idempotency_key": "k1"})
        )
    assert again["id"] == first["id"]
    assert "replayed" not in first and again["replayed"] is True
    async with connect(bob.token) as b:
        inbox = data(await b.call_tool("check_inbox", {}))
    assert [m["body"] for m in inbox["messages"]] == ["once"]


async def test_a_blocker_reaches_the_operator_too(
    connect: Connect, make_agent: MakeAgent, hub: Hub
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    async with connect(alice.token) as a:
        await a.call_tool(
            "send_message", {"to": "bob", "kind": "blocker", "subject": "stuck", "body": "help"}
        )
    assert hub.operator_token is not None
    async with connect(hub.operator_token) as op:
        inbox = data(await op.call_tool("check_inbox", {}))
    assert [(m["kind"], m["copy_reason"]) for m in inbox["messages"]] == [("blocker", "blocker")]


async def test_a_wrong_token_is_refused(connect: Connect, make_agent: MakeAgent) -> None:
    await make_agent("alice")
    for token, code in (("pt_not-a-token", "invalid_token"), (None, "missing_token")):
        async with connect(token) as client:
            for tool, args in (("whoami", {}), ("check_inbox", {})):
                body = refusal(await client.call_tool(tool, args))
                assert body["code"] == code


async def test_another_agents_message_is_refused(connect: Connect, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    carol = await make_agent("carol")
    async with connect(alice.token) as a:
        sent = data(
            await a.call_tool(
                "send_message", {"to": "bob", "kind": "task", "subject": "private", "body": "x"}
            )
        )
    async with connect(carol.token) as c:
        forbidden = refusal(await c.call_tool("read_message", {"id": sent["id"]}))
        assert forbidden["code"] == "message_forbidden"
        # The refusal names no inbox: a stranger must not learn who received the message.
        assert "bob" not in forbidden["message"]
        assert refusal(await c.call_tool("thread", {"id": sent["id"]}))["code"] == (
            "message_forbidden"
        )
        not_mine = refusal(
            await c.call_tool("update_message", {"id": sent["id"], "status": "read"})
        )
        assert not_mine["code"] == "not_recipient"
    # The sender reads what it sent, but only the recipient moves it forward.
    async with connect(alice.token) as a:
        assert data(await a.call_tool("read_message", {"id": sent["id"]}))["id"] == sent["id"]
        sender = refusal(await a.call_tool("update_message", {"id": sent["id"], "status": "read"}))
        assert sender["code"] == "not_recipient"


async def test_an_unknown_kind_is_refused(connect: Connect, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    async with connect(alice.token) as a:
        body = refusal(
            await a.call_tool(
                "send_message", {"to": "bob", "kind": "gossip", "subject": "s", "body": "b"}
            )
        )
    assert body["code"] == "unknown_kind"
    assert "'gossip'" in body["message"]
    assert body["details"]["allowed"] == list(MAIL_KINDS)


@pytest.mark.parametrize(
    ("tool", "args", "code"),
    [
        (
            "send_message",
            {"to": "nobody", "kind": "task", "subject": "s", "body": "b"},
            "recipient_not_found",
        ),
        ("send_message", {"to": "bob", "kind": "task"}, "validation_error"),
        (
            "send_message",
            {"to": "bob", "kind": "task", "subject": "s" * 501, "body": ""},
            "validation_error",
        ),
        ("check_inbox", {"limit": 0}, "validation_error"),
        ("check_inbox", {"since": "yesterday"}, "invalid_since"),
        ("read_message", {"id": "01NOPE"}, "message_not_found"),
        ("update_message", {"id": "01NOPE", "status": "read"}, "message_not_found"),
        ("wait_for_mail", {"timeout_s": -1}, "invalid_timeout"),
        ("wait_for_mail", {"timeout_s": 301}, "invalid_timeout"),
    ],
)
async def test_bad_arguments_are_refused_with_a_code(
    connect: Connect, make_agent: MakeAgent, tool: str, args: dict[str, object], code: str
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    async with connect(alice.token) as a:
        assert refusal(await a.call_tool(tool, args))["code"] == code


async def test_mail_only_moves_forward(connect: Connect, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with connect(alice.token) as a:
        sent = data(
            await a.call_tool(
                "send_message", {"to": "bob", "kind": "info", "subject": "s", "body": ""}
            )
        )
    async with connect(bob.token) as b:
        await b.call_tool("update_message", {"id": sent["id"], "status": "in_progress"})
        back = refusal(await b.call_tool("update_message", {"id": sent["id"], "status": "read"}))
        assert back["code"] == "backward_transition"
        bad = refusal(await b.call_tool("update_message", {"id": sent["id"], "status": "deleted"}))
        assert bad["code"] == "invalid_status"


async def test_wait_for_mail_returns_when_another_agent_sends(
    connect: Connect, make_agent: MakeAgent, hub: Hub
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with connect(alice.token) as a, connect(bob.token) as b:
        waiting = asyncio.create_task(a.call_tool("wait_for_mail", {"timeout_s": 60}))
        await waiting_on_inbox(hub, "alice")
        assert not waiting.done()
        sent = data(
            await b.call_tool(
                "send_message", {"to": "alice", "kind": "task", "subject": "wake", "body": "up"}
            )
        )
        woke = data(await waiting)
    assert woke["timed_out"] is False
    assert [m["id"] for m in woke["messages"]] == [sent["id"]]
    # What the wait returned is delivered: the next wait does not return it again.
    async with connect(alice.token) as a:
        again = data(await a.call_tool("wait_for_mail", {"timeout_s": 0.05}))
        assert again == {"messages": [], "count": 0, "timed_out": True}
        still_unread = data(await a.call_tool("check_inbox", {"unread": True}))
        assert [m["id"] for m in still_unread["messages"]] == [sent["id"]]


async def test_wait_for_mail_returns_waiting_mail_at_once(
    connect: Connect, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with connect(bob.token) as b:
        for n in range(3):
            await b.call_tool(
                "send_message", {"to": "alice", "kind": "info", "subject": f"m{n}", "body": ""}
            )
    async with connect(alice.token) as a:
        # A long timeout that is never reached: the mail is already there.
        got = data(await a.call_tool("wait_for_mail", {"timeout_s": 300}))
    assert [m["subject"] for m in got["messages"]] == ["m0", "m1", "m2"]


async def test_wait_for_mail_times_out_empty(connect: Connect, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    async with connect(alice.token) as a:
        got = data(await a.call_tool("wait_for_mail", {"timeout_s": 0.05}))
    assert got == {"messages": [], "count": 0, "timed_out": True}


async def test_unstorable_text_is_refused_at_the_mcp_edge(
    connect: Connect, make_agent: MakeAgent
) -> None:
    """A NUL in an id would otherwise reach PostgreSQL and fail there as a storage error."""
    alice = await make_agent("alice")
    async with connect(alice.token) as a:
        refused = refusal(await a.call_tool("read_message", {"id": "01\x00X"}))
        assert refused["code"] == "invalid_text"
        assert "id" in refused["message"]
        refused = refusal(
            await a.call_tool("send_message", {"to": "bob", "kind": "task", "body": "a\x00b"})
        )
        assert refused["code"] == "invalid_text"
