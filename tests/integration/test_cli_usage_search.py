"""``parley usage`` (by agent, day, model, worker tree, discussion, meeting), ``parley usage
budget`` and ``parley search`` against a served hub, after turns through the real openai SDK
against the fake model server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from typer.testing import CliRunner

from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.workers.records import StartSpec
from parley.surfaces.cli.app import app
from tests.conftest import MakeAgent
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.test_channels import Served


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


async def test_usage_totals_budgets_and_search_from_the_cli(
    hub: Hub, operator: Principal, make_agent: MakeAgent, model: FakeOpenAIServer, port: int
) -> None:
    runtime = {
        "kind": "openai",
        "model": "fake-model",
        "base_url": model.base_url,
        "api_key": "k",
        "max_retries": 0,
    }
    alice = await make_agent("alice", runtime=runtime)
    assert alice.principal.work_channel_id is not None
    await hub.channels.post(operator, alice.principal.work_channel_id, "hello")
    worker = await hub.workers.start(operator, StartSpec(agent_id="alice", prompt="go"))
    await hub.tasks.wait_idle()
    bob_handle = await make_agent("bob")
    bob = bob_handle.principal
    await hub.mail.send(bob, SendRequest(to="alice", kind="task", subject="Parser", body="Fix."))

    runner = CliRunner()
    async with Served(hub, port) as served:

        def cli(*args: str, token: str | None = None) -> Any:
            base = ["--url", served.url, "--token", token or str(hub.operator_token), "--json"]
            result = runner.invoke(app, [*base, *args])
            assert result.exit_code == 0, result.output
            return json.loads(result.output)

        async def run(*args: str, token: str | None = None) -> Any:
            return await asyncio.to_thread(cli, *args, token=token)

        by_agent = await run("usage", "--by", "agent")
        assert [(g["key"], g["turns"]) for g in by_agent["groups"]] == [("alice", 2)]
        assert by_agent["total"]["input_tokens"] == 84
        by_model = await run("usage", "--by", "model")
        assert [g["key"] for g in by_model["groups"]] == ["fake-model"]
        day = hub.ctx.clock.now().date().isoformat()
        assert [g["key"] for g in (await run("usage", "--by", "day"))["groups"]] == [day]
        tree = await run("usage", "--by", "tree", "--worker", worker.id)
        assert [(g["key"], g["turns"]) for g in tree["groups"]] == [(worker.id, 1)]

        await run("usage", "budget", "set", "--agent", "alice", "--tokens", "10")
        listed = await run("usage", "budget", "list")
        assert listed[0]["exhausted"] is True
        assert (await run("usage", "budget", "clear", "--agent", "alice")) == {"removed": True}

        hits = await run("search", "parser")
        assert [(h["source"], h["sender_id"]) for h in hits] == [("mail", "bob")]
        assert await run("search", "parser", "--source", "channel") == []
        assert await run("search", "parser", token=alice.token) != []
        # The table names a channel hit's channel by its name.
        group = await hub.channels.create(operator, ChannelSpec(name="design", members=["bob"]))
        await hub.channels.post(operator, group.id, "The tokenizer needs a rewrite.")

        def table_of(*args: str) -> str:
            base = ["--url", served.url, "--token", str(hub.operator_token)]
            result = runner.invoke(app, [*base, *args], env={"COLUMNS": "80"})
            assert result.exit_code == 0, result.output
            return result.output

        shown = await asyncio.to_thread(table_of, "search", "tokenizer")
        assert "#design" in shown and group.id not in shown
        # An agent's usage is its own only: bob has none.
        assert (await run("usage", token=bob_handle.token))["groups"] == []
