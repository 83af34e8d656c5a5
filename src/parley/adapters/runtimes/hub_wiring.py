"""How a command-line agent is connected to the hub for a turn: the MCP server entry each CLI
reads, and the environment every command gets.

The hub gives each turn of a command agent its MCP endpoint and a token of that turn
(:class:`~parley.core.runtime.HubAccess`); nothing of it is stored in the agent's runtime
config. Every command finds them in its environment (``PARLEY_URL``, ``PARLEY_MCP_URL``,
``PARLEY_TOKEN``), so a script, or a tool the CLI runs, can call the hub as the agent in this
turn. The presets also hand them to the CLI as an MCP server named ``parley``:

- Claude Code reads ``--mcp-config <file>``: a JSON file holding the endpoint and the token in
  an ``Authorization`` header, written for the turn in a private directory (mode 0600) and
  removed when the turn ends; ``--allowedTools mcp__parley`` lets the non-interactive CLI call
  its tools without asking.
- Codex reads ``-c mcp_servers.parley.*`` overrides: the endpoint, ``bearer_token_env_var``
  naming ``PARLEY_TOKEN`` (so the token stays in the environment, out of the command line),
  and ``default_tools_approval_mode = "approve"``, without which ``codex exec`` refuses every
  tool of the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from parley.core.runtime import HubAccess

SERVER_NAME = "parley"
TOKEN_ENV = "PARLEY_TOKEN"
URL_ENV = "PARLEY_URL"
MCP_URL_ENV = "PARLEY_MCP_URL"


def profile_url(access: HubAccess, profile: str) -> str:
    return f"{access.mcp_url}?profile={profile}"


def hub_env(access: HubAccess | None, profile: str) -> dict[str, str]:
    """The variables that tell a command where the hub is and who it is in this turn."""
    if access is None:
        return {}
    return {
        URL_ENV: access.base_url,
        MCP_URL_ENV: profile_url(access, profile),
        TOKEN_ENV: access.token,
    }


@contextlib.contextmanager
def claude_mcp_config(access: HubAccess, profile: str) -> Iterator[Path]:
    """A private ``--mcp-config`` file for one turn, removed (with its directory) when the
    turn ends. Claude Code reads it when its process starts; a process kept alive for later
    turns keeps the server it was given (the turn token of a session stays the same)."""
    folder = Path(tempfile.mkdtemp(prefix="parley-mcp-"))  # mode 0700
    path = folder / "mcp.json"
    entry = {
        "type": "http",
        "url": profile_url(access, profile),
        "headers": {"Authorization": f"Bearer {access.token}"},
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump({"mcpServers": {SERVER_NAME: entry}}, file)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def claude_mcp_args(config: Path) -> list[str]:
    return ["--mcp-config", str(config), "--allowedTools", f"mcp__{SERVER_NAME}"]


def codex_mcp_args(access: HubAccess, profile: str) -> list[str]:
    """``-c`` overrides (TOML values) that declare the hub's MCP server to ``codex exec``."""
    prefix = f"mcp_servers.{SERVER_NAME}"
    values = {
        "url": profile_url(access, profile),
        "bearer_token_env_var": TOKEN_ENV,
        "default_tools_approval_mode": "approve",
    }
    args: list[str] = []
    for key, value in values.items():
        args += ["-c", f"{prefix}.{key}={json.dumps(value)}"]
    return args
