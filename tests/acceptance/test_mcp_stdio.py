"""``python -m parley.surfaces.mcp.stdio`` as a real subprocess driven by the SDK's stdio
client: relaying to a running hub, and serving an embedded hub."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mcp import Client

from parley.config import Settings
from parley.core.runtime import DONE_MARKER
from parley.surfaces.mcp import PROFILES
from tests.acceptance.mcp_support import (
    child_env,
    create_agents,
    hub_process,
    run_stdio_to_exit,
    stdio_server,
)
from tests.integration.mcp_support import (
    data,
    http_client,
    notice_to_finish,
    refusal,
    take_turn,
)


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
        assert "invalid_token" in err
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


async def test_stdio_relays_the_discussion_tools(settings: Settings, tmp_path: Path) -> None:
    """A remote agent on stdio (the discuss profile) opens a discussion and finishes it with
    two others on Streamable HTTP; the hub's refusals come through the relay with its codes."""
    ids = ("ini", "bob", "cat")
    tokens = await create_agents(
        settings,
        *ids,
        runtime={"kind": "remote"},
        workspaces=tmp_path / "ws",
        accepts_channels_from=["ini"],
    )
    async with hub_process(settings) as url:
        env = child_env(settings, PARLEY_URL=url, PARLEY_TOKEN=tokens["ini"])
        async with (
            Client(stdio_server(env, "--profile", "discuss")) as ini,
            http_client(f"{url}/mcp", tokens["bob"]) as bob,
            http_client(f"{url}/mcp", tokens["cat"]) as cat,
        ):
            listed = await ini.list_tools()
            assert [t.name for t in listed.tools] == list(PROFILES["discuss"])
            work = data(await ini.call_tool("whoami", {}))["work_channel_id"]
            disc = data(
                await ini.call_tool(
                    "create_private_channel",
                    {
                        "name": "review",
                        "members": ["bob", "cat"],
                        "callbackChannelId": work,
                        "discussGuide": "Pick a name.",
                    },
                )
            )["id"]
            first = await take_turn(ini)
            body = refusal(await bob.call_tool("no_reply", {"turn_id": first["turn_id"]}))
            assert body["code"] == "not_your_turn"
            # A newer message in the channel supersedes the running rounds and this turn.
            await bob.call_tool("post", {"channel_id": disc, "content": "new facts first"})
            stale = await ini.call_tool("speak", {"turn_id": first["turn_id"], "text": "late"})
            assert refusal(stale)["code"] == "new_message"

            for number in (1, 2):
                for name, client in (("ini", ini), ("bob", bob), ("cat", cat)):
                    turn = await take_turn(client)
                    assert (turn["channel_id"], turn["round"]) == (disc, number)
                    vote = f" {DONE_MARKER}" if number == 2 else ""
                    text = f"{name} in round {number}{vote}"
                    await client.call_tool("speak", {"turn_id": turn["turn_id"], "text": text})
            assert (await notice_to_finish(ini))["payload"]["end_reason"] == "unanimous"

            (tmp_path / "ws" / "ini" / "summary.md").write_text("# Name\nparley")
            not_mine = await bob.call_tool(
                "discuss_callback", {"summaryPath": "summary.md", "discussion_id": disc}
            )
            assert refusal(not_mine)["code"] == "not_initiator"
            outside = await ini.call_tool("discuss_callback", {"summaryPath": "../bob"})
            assert refusal(outside)["code"] == "summary_outside_workspace"
            closed = data(await ini.call_tool("discuss_callback", {"summaryPath": "summary.md"}))
            assert closed["discussion"]["status"] == "closed"
            wake = await take_turn(ini)
            assert wake["channel_id"] == work
            assert closed["discussion"]["summaryPath"] in wake["prompt"]
            await ini.call_tool("no_reply", {"turn_id": wake["turn_id"]})

            listed = data(await ini.call_tool("list_channels", {}))["channels"]
            assert {c["id"]: c["status"] for c in listed} == {work: "active", disc: "closed"}
            # A closed discussion keeps a late post for the record; the moderator answers it.
            late = data(await ini.call_tool("post", {"channel_id": disc, "content": "thanks"}))
            read = data(await ini.call_tool("read_channel", {"channel_id": disc, "limit": 500}))
            said = [m["content"] for m in read["messages"] if m["sender_kind"] == "agent"]
            assert said == [
                "new facts first",
                *(f"{n} in round {r}" for r in (1, 2) for n in ids),
                "thanks",
            ]
            last = read["messages"][-1]
            assert last["seq"] == late["seq"] + 1
            assert last["content"].startswith("[Channel Closed]")
