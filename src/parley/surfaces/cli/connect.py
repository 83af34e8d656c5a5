"""``parley agent connect``: the exact configuration an MCP client needs to act as one agent.

The snippets are plain text on stdout, never Rich (which would wrap and eat brackets), so they
can be copied or piped as they are; ``--json`` gives the same as data.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, Literal, get_args
from urllib.parse import urlencode

ClientKind = Literal["claude-code", "codex", "generic"]
CLIENTS: tuple[str, ...] = get_args(ClientKind)
PROFILES = ("default", "mail", "discuss", "rooms", "workers")
SERVER_NAME = "parley"
TOKEN_VAR = "PARLEY_TOKEN"
# Longer than the longest wait_for_mail / wait_for_turn the hub accepts (300 s).
TOOL_TIMEOUT_S = 330


@dataclass(frozen=True)
class Connection:
    """Who connects to which hub, and how the token was obtained."""

    agent_id: str
    hub_url: str
    token: str
    profile: str = "default"
    token_issued: bool = False
    # The issued token's public id and label (``connect:<client>``), to find and revoke it.
    token_id: str | None = None
    token_label: str | None = None

    @property
    def mcp_url(self) -> str:
        endpoint = f"{self.hub_url.rstrip('/')}/mcp"
        if self.profile == "default":
            return endpoint
        return f"{endpoint}?{urlencode({'profile': self.profile})}"

    @property
    def header(self) -> str:
        return f"Authorization: Bearer {self.token}"


def claude_code(c: Connection) -> dict[str, Any]:
    """``claude mcp add`` for a persistent server, and a file for ``claude --mcp-config``."""
    add = ["claude", "mcp", "add", "--transport", "http", SERVER_NAME, c.mcp_url]
    command = shlex.join([*add, "--header", c.header])
    config = {
        "mcpServers": {
            SERVER_NAME: {
                "type": "http",
                "url": c.mcp_url,
                "headers": {"Authorization": f"Bearer {c.token}"},
            }
        }
    }
    return {"command": command, "mcp_config": config}


def codex(c: Connection) -> dict[str, Any]:
    """Codex reads the bearer token from an environment variable it is told the name of. Its
    default tool timeout would cut a long ``wait_for_turn``: every form sets a longer one."""
    overrides = [
        f"mcp_servers.{SERVER_NAME}.url={json.dumps(c.mcp_url)}",
        f"mcp_servers.{SERVER_NAME}.bearer_token_env_var={json.dumps(TOKEN_VAR)}",
        f"mcp_servers.{SERVER_NAME}.tool_timeout_sec={TOOL_TIMEOUT_S}",
    ]
    command = shlex.join(["codex", *(arg for o in overrides for arg in ("-c", o))])
    # `codex mcp add` has no timeout option: the timeout rides along as a `-c` override.
    add = shlex.join(
        [
            "codex",
            "mcp",
            "add",
            SERVER_NAME,
            "--url",
            c.mcp_url,
            "--bearer-token-env-var",
            TOKEN_VAR,
        ]
    )
    toml = (
        f"[mcp_servers.{SERVER_NAME}]\n"
        f"url = {json.dumps(c.mcp_url)}\n"
        f"bearer_token_env_var = {json.dumps(TOKEN_VAR)}\n"
        f"tool_timeout_sec = {TOOL_TIMEOUT_S}\n"
    )
    return {
        "env": f"export {TOKEN_VAR}={shlex.quote(c.token)}",
        "command": command,
        "mcp_add": add,
        "config_toml": toml,
    }


def generic(c: Connection) -> dict[str, Any]:
    """Streamable HTTP (URL + header) and stdio (``parley mcp`` relaying to the hub)."""
    args = ["mcp"] if c.profile == "default" else ["mcp", "--profile", c.profile]
    env = {"PARLEY_URL": c.hub_url, TOKEN_VAR: c.token}
    parley = parley_executable()
    stdio = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), parley, *args])
    return {
        "url": c.mcp_url,
        "header": c.header,
        "stdio_command": stdio,
        "stdio_config": {
            "mcpServers": {SERVER_NAME: {"command": parley, "args": args, "env": env}}
        },
    }


def parley_executable() -> str:
    """The absolute path of the ``parley`` being run: an MCP client starts its stdio servers
    with its own PATH, which seldom holds the project's virtual environment."""
    invoked = sys.argv[0]
    if os.path.basename(invoked).startswith("parley") and os.path.isfile(invoked):
        return os.path.abspath(invoked)
    found = shutil.which("parley")
    return os.path.abspath(found) if found else "parley"


BUILDERS = {"claude-code": claude_code, "codex": codex, "generic": generic}


def snippets(client: str, c: Connection) -> dict[str, Any]:
    return BUILDERS[client](c)


def as_json(client: str, c: Connection) -> dict[str, Any]:
    return {
        "agent_id": c.agent_id,
        "client": client,
        "hub_url": c.hub_url,
        "mcp_url": c.mcp_url,
        "profile": c.profile,
        "token": c.token,
        "token_issued": c.token_issued,
        "token_id": c.token_id,
        "token_label": c.token_label,
        "snippets": snippets(client, c),
    }


def comment(text: str) -> str:
    """``text`` as shell comment lines that fit 80 columns (a word longer than a line, an id
    or a path, is kept whole)."""
    return textwrap.fill(
        text,
        width=79,
        initial_indent="# ",
        subsequent_indent="# ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def token_note(c: Connection) -> str:
    if c.token_issued:
        return comment(
            f"Each run issues a new token: this one is {c.token_id} labelled "
            f"{c.token_label!r}, for {c.agent_id!r}; its earlier tokens stay valid. "
            f"`parley token list {c.agent_id}` lists them, `parley token revoke {c.agent_id} "
            "<id>` revokes one; --token reuses a token instead of issuing one."
        )
    return comment(f"Using the token given with --token for {c.agent_id!r}.")


def render(client: str, c: Connection) -> str:
    """The text a person copies: shell lines, with ``#`` comments saying what each is."""
    s = snippets(client, c)
    lines = [token_note(c)]
    if client == "claude-code":
        lines += [
            comment(f"Claude Code, as agent {c.agent_id!r}, for every session in this project:"),
            s["command"],
            "",
            "# Or for one session only: save this as parley-mcp.json and run",
            "# `claude --mcp-config parley-mcp.json`",
            json.dumps(s["mcp_config"], indent=2),
        ]
    elif client == "codex":
        lines += [
            comment(f"Codex, as agent {c.agent_id!r}: the token goes in an environment variable."),
            s["env"],
            s["command"],
            "",
            "# Or permanently, with PARLEY_TOKEN set as above: `codex mcp add`, then add",
            f"# tool_timeout_sec = {TOOL_TIMEOUT_S} to [mcp_servers.{SERVER_NAME}] in",
            "# ~/.codex/config.toml (without it long waits for a turn are cut):",
            s["mcp_add"],
            "# or the whole table in ~/.codex/config.toml:",
            s["config_toml"].rstrip("\n"),
        ]
    else:
        lines += [
            comment(f"Any MCP client, as agent {c.agent_id!r}, over Streamable HTTP:"),
            f"#   URL:    {s['url']}",
            f"#   Header: {s['header']}",
            "",
            "# Or over stdio: the client starts `parley mcp` (by its absolute path), which",
            "# relays to the hub.",
            s["stdio_command"],
            "# as an mcpServers entry:",
            json.dumps(s["stdio_config"], indent=2),
        ]
    return "\n".join(lines) + "\n"
