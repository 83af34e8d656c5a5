"""``parley agent connect`` against a real ``parley serve``: every snippet it prints is used as
printed to connect a real MCP client as the agent (Streamable HTTP, and ``parley mcp`` on
stdio)."""

from __future__ import annotations

import json
import shlex
import tomllib
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from parley.surfaces.mcp import PROFILES
from tests.acceptance.cli_support import Cli, ServedHub, child_env, parley_executable
from tests.integration.mcp_support import data


async def whoami_over_http(url: str, headers: dict[str, str]) -> dict[str, Any]:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return data(await client.call_tool("whoami", {}))


def connect(cli: Cli, *args: str) -> dict[str, Any]:
    printed: dict[str, Any] = cli.json("agent", "connect", *args)
    return printed


async def test_the_claude_code_snippets_connect_as_the_agent(cli: Cli, hub: ServedHub) -> None:
    cli.ok("agent", "add", "alice", "--runtime", "remote")
    printed = connect(cli, "alice", "--client", "claude-code")
    assert (printed["mcp_url"], printed["token_issued"]) == (f"{hub.url}/mcp", True)
    words = shlex.split(printed["snippets"]["command"])
    assert words == [
        "claude",
        "mcp",
        "add",
        "--transport",
        "http",
        "parley",
        f"{hub.url}/mcp",
        "--header",
        f"Authorization: Bearer {printed['token']}",
    ]
    server = printed["snippets"]["mcp_config"]["mcpServers"]["parley"]
    assert server["type"] == "http"
    me = await whoami_over_http(server["url"], server["headers"])
    assert me["id"] == "alice"
    name, _, value = words[-1].partition(": ")
    assert (await whoami_over_http(words[6], {name: value}))["id"] == "alice"


async def test_the_codex_snippets_connect_as_the_agent(cli: Cli, hub: ServedHub) -> None:
    cli.ok("agent", "add", "alice")
    printed = connect(cli, "alice", "--client", "codex", "--profile", "discuss")
    snippets = printed["snippets"]
    export = shlex.split(snippets["env"])
    assert export[0] == "export" and export[1] == f"PARLEY_TOKEN={printed['token']}"
    words = shlex.split(snippets["command"])
    assert words[0] == "codex" and words[1::2] == ["-c", "-c", "-c"]
    overrides = tomllib.loads("\n".join(words[2::2]).replace("mcp_servers.parley.", ""))
    # Without a tool timeout longer than the longest wait the hub accepts (300 s), Codex cuts
    # a long wait_for_turn.
    assert overrides == {
        "url": f"{hub.url}/mcp?profile=discuss",
        "bearer_token_env_var": "PARLEY_TOKEN",
        "tool_timeout_sec": 330,
    }
    config = tomllib.loads(snippets["config_toml"])["mcp_servers"]["parley"]
    assert config == overrides
    assert shlex.split(snippets["mcp_add"]) == [
        "codex",
        "mcp",
        "add",
        "parley",
        "--url",
        overrides["url"],
        "--bearer-token-env-var",
        "PARLEY_TOKEN",
    ]
    readable = cli.ok(
        "agent", "connect", "alice", "--client", "codex", "--profile", "discuss",
        "--token", printed["token"],
    )  # fmt: skip
    assert snippets["mcp_add"] in readable.stdout.splitlines()
    assert "tool_timeout_sec = 330" in readable.stdout
    headers = {"Authorization": f"Bearer {printed['token']}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(config["url"], http_client=http)) as client,
    ):
        listed = await client.list_tools()
    assert [t.name for t in listed.tools] == list(PROFILES["discuss"])


async def test_the_generic_snippets_connect_over_http_and_stdio(cli: Cli, hub: ServedHub) -> None:
    cli.ok("agent", "add", "alice")
    printed = connect(cli, "alice", "--profile", "mail")
    snippets = printed["snippets"]
    name, _, value = snippets["header"].partition(": ")
    assert (await whoami_over_http(snippets["url"], {name: value}))["id"] == "alice"

    entry = snippets["stdio_config"]["mcpServers"]["parley"]
    # An MCP client starts stdio servers with its own PATH: the command is absolute.
    assert entry["command"] == parley_executable()
    assert entry["command"].startswith("/")
    assert entry["args"] == ["mcp", "--profile", "mail"]
    assert entry["env"] == {"PARLEY_URL": hub.url, "PARLEY_TOKEN": printed["token"]}
    assert shlex.split(snippets["stdio_command"]) == [
        "env",
        *(f"{k}={v}" for k, v in entry["env"].items()),
        entry["command"],
        *entry["args"],
    ]
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env=child_env(**entry["env"])
    )
    async with Client(params) as client:
        assert data(await client.call_tool("whoami", {}))["id"] == "alice"
        listed = await client.list_tools()
    assert [t.name for t in listed.tools] == list(PROFILES["mail"])


def test_a_given_token_is_checked_and_used_as_it_is(cli: Cli) -> None:
    alice = cli.json("agent", "add", "alice")["token"]
    bob = cli.json("agent", "add", "bob")["token"]
    printed = connect(cli, "alice", "--token", alice)
    assert (printed["token"], printed["token_issued"]) == (alice, False)
    refused = cli.fails("agent", "connect", "alice", "--token", bob, code="token_mismatch")
    assert "'bob'" in refused.stderr and "'alice'" in refused.stderr
    cli.fails("agent", "connect", "alice", "--token", "pt_wrong", code="invalid_token")
    cli.fails("agent", "connect", "ghost", code="principal_not_found")


def test_the_readable_output_is_the_snippet_with_comments(cli: Cli, hub: ServedHub) -> None:
    cli.ok("agent", "add", "alice")
    out = cli.ok("agent", "connect", "alice", "--client", "claude-code", "--url", "http://h:1")
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# Each run issues a new token: this one is ")
    comments = [line for line in lines if line.startswith("#")]
    note = " ".join(line.removeprefix("# ") for line in comments)
    assert "labelled 'connect:claude-code', for 'alice'" in note
    # The comments read at 80 columns.
    assert all(len(line) <= 80 for line in comments), comments
    [command] = [line for line in lines if line.startswith("claude mcp add")]
    token = shlex.split(command)[-1].removeprefix("Authorization: Bearer ")
    assert command == (
        "claude mcp add --transport http parley http://h:1/mcp --header "
        f"'Authorization: Bearer {token}'"
    )
    start = lines.index("{")
    config = json.loads("\n".join(lines[start:]))
    assert config["mcpServers"]["parley"]["url"] == "http://h:1/mcp"
    usage = cli.run("agent", "connect", "alice", "--client", "vim")
    assert usage.returncode == 2 and "claude-code, codex, generic" in usage.stderr


async def test_parley_mcp_exits_with_the_stdio_servers_status(cli: Cli, hub: ServedHub) -> None:
    result = cli.run("mcp", env={"PARLEY_URL": hub.url, "PARLEY_TOKEN": "pt_wrong"}, home=False)
    assert result.returncode == 2
    assert "invalid_token" in result.stderr
    assert result.stdout == ""
