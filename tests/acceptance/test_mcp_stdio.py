"""``python -m parley.surfaces.mcp.stdio`` as a real subprocess driven by the SDK's stdio
client: relaying to a running hub, and serving an embedded hub."""

from __future__ import annotations

import asyncio

from mcp import Client

from parley.config import Settings
from parley.surfaces.mcp import PROFILES
from tests.acceptance.mcp_support import (
    child_env,
    create_agents,
    hub_process,
    run_stdio_to_exit,
    stdio_server,
)
from tests.integration.mcp_support import data, http_client, refusal


async def test_stdio_relays_to_a_running_hub(settings: Settings) -> None:
    tokens = await create_agents(settings, "alice", "bob")
    async with hub_process(settings) as url:
        env = child_env(settings, PARLEY_URL=url, PARLEY_TOKEN=tokens["alice"])
        async with (
            Client(stdio_server(env)) as alice,
            http_client(f"{url}/mcp", tokens["bob"]) as bob,
        ):
            listed = await alice.list_tools()
            assert [t.name for t in listed.tools] == list(PROFILES["default"])
            assert data(await alice.call_tool("whoami", {}))["id"] == "alice"

            sent = data(
                await alice.call_tool(
                    "send_message", {"to": "bob", "kind": "task", "subject": "s", "body": "b"}
                )
            )
            inbox = data(await bob.call_tool("check_inbox", {}))
            assert [(m["id"], m["from_id"]) for m in inbox["messages"]] == [(sent["id"], "alice")]

            # The hub's rules hold through the relay, with the hub's codes.
            forbidden = await alice.call_tool(
                "update_message", {"id": sent["id"], "status": "read"}
            )
            assert refusal(forbidden)["code"] == "not_recipient"

            waiting = asyncio.create_task(alice.call_tool("wait_for_mail", {"timeout_s": 120}))
            answer = data(
                await bob.call_tool(
                    "send_message",
                    {
                        "to": "alice",
                        "kind": "report",
                        "subject": "done",
                        "body": "ok",
                        "parent_message_id": sent["id"],
                    },
                )
            )
            woke = data(await waiting)
            assert [m["id"] for m in woke["messages"]] == [answer["id"]]


async def test_stdio_relay_with_the_mail_profile(settings: Settings) -> None:
    tokens = await create_agents(settings, "alice")
    async with hub_process(settings) as url:
        env = child_env(settings, PARLEY_URL=url, PARLEY_TOKEN=tokens["alice"])
        async with Client(stdio_server(env, "--profile", "mail")) as alice:
            listed = await alice.list_tools()
    assert [t.name for t in listed.tools] == list(PROFILES["mail"])


async def test_stdio_refuses_to_start_without_a_usable_hub_or_token(settings: Settings) -> None:
    tokens = await create_agents(settings, "alice")
    async with hub_process(settings) as url:
        status, err = await run_stdio_to_exit(
            child_env(settings, PARLEY_URL=url, PARLEY_TOKEN="pt_wrong")
        )
        assert status == 2
        assert "unauthenticated" in err
    # The hub is gone now: its URL no longer answers.
    status, err = await run_stdio_to_exit(
        child_env(settings, PARLEY_URL=url, PARLEY_TOKEN=tokens["alice"])
    )
    assert status == 2
    assert "hub_unreachable" in err and url in err
    status, err = await run_stdio_to_exit(child_env(settings))
    assert status == 2
    assert "PARLEY_TOKEN" in err


async def test_stdio_serves_an_embedded_hub(settings: Settings) -> None:
    tokens = await create_agents(settings, "alice", "bob")
    alice_env = child_env(settings, PARLEY_TOKEN=tokens["alice"])
    async with Client(stdio_server(alice_env)) as alice:
        assert data(await alice.call_tool("whoami", {}))["id"] == "alice"
        sent = data(
            await alice.call_tool(
                "send_message", {"to": "alice", "kind": "notice", "subject": "note", "body": "x"}
            )
        )
        got = data(await alice.call_tool("wait_for_mail", {"timeout_s": 60}))
        assert [m["id"] for m in got["messages"]] == [sent["id"]]
        forbidden = await alice.call_tool(
            "send_message", {"to": "bob", "kind": "rumour", "subject": "s", "body": "b"}
        )
        assert refusal(forbidden)["code"] == "unknown_kind"
    # The mail is durable: a later session on the same data root finds it.
    bob_env = child_env(settings, PARLEY_TOKEN=tokens["bob"])
    async with Client(stdio_server(bob_env)) as bob:
        assert data(await bob.call_tool("whoami", {}))["id"] == "bob"
        forbidden = await bob.call_tool("read_message", {"id": sent["id"]})
        assert refusal(forbidden)["code"] == "message_forbidden"
