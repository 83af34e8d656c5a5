"""How the ``command`` runtime wires a CLI to the hub for a turn: environment, Claude Code's
private ``--mcp-config`` file, Codex's ``-c`` overrides (nothing stored in the config)."""

from __future__ import annotations

import dataclasses
import json
import stat

from parley.adapters.runtimes import hub_wiring
from parley.adapters.runtimes.command import CommandConfig, CommandRuntime
from parley.core.runtime import HubAccess
from tests.fakes.turns import make_turn

ACCESS = HubAccess(mcp_url="http://127.0.0.1:8765/mcp", token="ptt_abc")


def test_every_command_learns_where_the_hub_is_and_the_turns_token() -> None:
    assert hub_wiring.hub_env(ACCESS, "workers") == {
        "PARLEY_URL": "http://127.0.0.1:8765",
        "PARLEY_MCP_URL": "http://127.0.0.1:8765/mcp?profile=workers",
        "PARLEY_TOKEN": "ptt_abc",
    }
    assert hub_wiring.hub_env(None, "workers") == {}


def test_claude_codes_mcp_config_is_private_and_removed_with_the_turn() -> None:
    with hub_wiring.claude_mcp_config(ACCESS, "workers") as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        server = json.loads(path.read_text())["mcpServers"]["parley"]
        assert server == {
            "type": "http",
            "url": "http://127.0.0.1:8765/mcp?profile=workers",
            "headers": {"Authorization": "Bearer ptt_abc"},
        }
    assert not path.exists() and not path.parent.exists()


def test_codex_is_given_the_server_its_token_variable_and_approval() -> None:
    args = hub_wiring.codex_mcp_args(ACCESS, "workers")
    assert args == [
        "-c",
        'mcp_servers.parley.url="http://127.0.0.1:8765/mcp?profile=workers"',
        "-c",
        'mcp_servers.parley.bearer_token_env_var="PARLEY_TOKEN"',
        "-c",
        'mcp_servers.parley.default_tools_approval_mode="approve"',
    ]
    assert "ptt_abc" not in " ".join(args)  # the token stays in the environment


def test_hub_mcp_false_gives_the_command_nothing_of_the_hub() -> None:
    turn = dataclasses.replace(make_turn(), hub=ACCESS)
    fake = {"preset": "codex", "executable": "/bin/true", "login_check": False}
    wired = CommandRuntime(CommandConfig.model_validate(fake))
    bare = CommandRuntime(CommandConfig.model_validate({**fake, "hub_mcp": False}))
    assert "mcp_servers.parley.url" in " ".join(wired._argv(None, turn))
    assert wired._child_env(turn)["PARLEY_TOKEN"] == "ptt_abc"
    assert "mcp_servers" not in " ".join(bare._argv(None, turn))
    assert bare._child_env(turn).get("PARLEY_TOKEN") != "ptt_abc"
