"""The lifecycle of agents, humans and tokens from the ``parley`` command: an agent whose runtime
cannot work is fixed in place, disabled, enabled and archived; humans are added and listed;
tokens are issued with a label, listed without their secret and revoked one at a time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from parley.service.hub import Hub
from parley.surfaces.cli.app import app
from tests.integration.test_channels import Served

Run = Callable[..., Any]


def runner_for(url: str, token: str) -> tuple[Run, Run]:
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> Any:
        result = runner.invoke(app, ["--url", url, "--token", token, *args])
        assert result.exit_code == code, result.output
        return result

    def as_json(*args: str) -> Any:
        return json.loads(invoke("--json", *args).output)

    return invoke, as_json


@pytest.fixture
async def served(hub: Hub, port: int) -> Any:
    async with Served(hub, port) as s:
        yield s


async def test_an_agent_is_fixed_disabled_enabled_and_archived_from_the_cli(
    hub: Hub, served: Served
) -> None:
    assert hub.operator_token is not None
    invoke, as_json = runner_for(served.url, hub.operator_token)

    def steps() -> None:
        as_json("agent", "add", "coder", "--runtime", "none")
        fixed = as_json(
            "agent",
            "update",
            "coder",
            "--runtime",
            "scripted",
            "--runtime-json",
            '{"replies": ["hi"]}',
            "--name",
            "Coder",
        )
        assert (fixed["runtime"]["kind"], fixed["display_name"]) == ("scripted", "Coder")
        # Settings alone keep the kind.
        kept = as_json("agent", "update", "coder", "--runtime-json", '{"replies": ["yo"]}')
        assert kept["runtime"] == {"kind": "scripted", "replies": ["yo"]}
        refused = invoke("agent", "update", "coder", "--runtime", "telepathy", code=2)
        assert "telepathy" in refused.output
        assert as_json("agent", "disable", "coder")["state"] == "disabled"
        listed = invoke("agent", "list").output
        assert "coder" in listed and "disabled" in listed
        assert "is enabled" in invoke("agent", "enable", "coder").output
        assert "archived" in invoke("agent", "archive", "coder").output
        assert "coder" not in [a["id"] for a in as_json("agent", "list")]
        assert "coder" in [a["id"] for a in as_json("agent", "list", "--archived")]
        again = invoke("agent", "add", "coder", code=1)
        assert "principal_archived" in again.output

    await asyncio.to_thread(steps)


async def test_humans_and_labelled_tokens_from_the_cli(hub: Hub, served: Served) -> None:
    assert hub.operator_token is not None
    invoke, as_json = runner_for(served.url, hub.operator_token)

    def steps() -> None:
        bob = as_json("human", "add", "bob", "--name", "Bob")
        assert (bob["principal"]["kind"], bob["principal"]["display_name"]) == ("human", "Bob")
        assert [h["id"] for h in as_json("human", "list")] == ["bob", "operator"]
        assert "Bob" in invoke("human", "show", "bob").output
        assert "principal_not_found" in invoke("human", "show", "nobody", code=1).output

        ci = as_json("token", "issue", "bob", "--label", "ci")
        listed = invoke("token", "list", "bob").output
        assert ci["id"] in listed and "ci" in listed and "never" in listed
        assert ci["token"] not in listed and bob["token"] not in listed
        assert "revoked token" in invoke("token", "revoke", "bob", ci["id"]).output
        assert [t["label"] for t in as_json("token", "list", "bob")] == ["initial"]

        as_json("agent", "add", "helper")
        first = as_json("agent", "connect", "helper", "--client", "claude-code")
        second = invoke("agent", "connect", "helper", "--client", "codex").output
        assert first["token_label"] == "connect:claude-code"
        assert "connect:codex" in second and "token revoke" in second
        labels = [t["label"] for t in as_json("token", "list", "helper")]
        assert sorted(labels) == ["connect:claude-code", "connect:codex", "initial"]

    await asyncio.to_thread(steps)


async def test_groups_and_rooms_by_name_from_the_cli(hub: Hub, served: Served) -> None:
    assert hub.operator_token is not None
    invoke, as_json = runner_for(served.url, hub.operator_token)

    def steps() -> None:
        as_json("agent", "add", "quiet")
        design = as_json("group", "create", "--name", "design", "--member", "quiet")
        twice = invoke("group", "create", "--name", "design", "--member", "quiet", code=1)
        assert "channel_name_taken" in twice.output
        posted = as_json("group", "post", "design", "x")
        assert posted["message"]["channel_id"] == design["id"]
        shown = as_json("channel", "show", design["id"][:20])
        assert shown["id"] == design["id"]
        listed = invoke("group", "list").output
        # The name with a short id, which addresses the group too.
        assert "design" in listed and design["id"] not in listed
        assert design["id"][:8] in listed

        room = as_json("room", "create", "standup")
        assert "room_name_taken" in invoke("room", "create", "standup", code=1).output
        assert as_json("room", "show", "standup")["room"]["id"] == room["id"]

    await asyncio.to_thread(steps)
