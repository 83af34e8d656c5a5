"""The MCP Inspector's CLI (the reference client from npm, pinned in ``node/package.json``)
against a running hub's ``/mcp``: it lists the tools and calls them with a bearer token."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from parley.config import Settings
from parley.surfaces.mcp import PROFILES
from tests.acceptance.mcp_support import create_agents, hub_process
from tests.integration.mcp_support import data, http_client

NODE_DIR = Path(__file__).parent / "node"
INSPECTOR = NODE_DIR / "node_modules" / ".bin" / "mcp-inspector"
RUN_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The Inspector CLI, installed from the lock file on first use."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed; the Inspector CLI needs them")
    if not INSPECTOR.exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            check=True,
            capture_output=True,
            timeout=600,
        )
    return INSPECTOR


async def run_inspector(inspector: Path, url: str, token: str, *args: str) -> tuple[int, str]:
    """Run one Inspector CLI request over Streamable HTTP; returns its exit status and
    output."""
    proc = await asyncio.create_subprocess_exec(
        str(inspector),
        "--cli",
        url,
        "--transport",
        "http",
        "--header",
        f"Authorization: Bearer {token}",
        *args,
        cwd=NODE_DIR,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def tool_json(output: str) -> dict[str, Any]:
    """The JSON a tools/call printed, and the tool's own JSON result inside it."""
    printed = json.loads(output[output.index("{") :])
    assert printed["isError"] is False, printed
    result: dict[str, Any] = json.loads(printed["content"][0]["text"])
    return result


async def test_the_inspector_lists_and_calls_the_tools(inspector: Path, settings: Settings) -> None:
    tokens = await create_agents(settings, "alice", "bob")
    async with hub_process(settings) as base:
        url = f"{base}/mcp"
        status, out = await run_inspector(inspector, url, tokens["alice"], "--method", "tools/list")
        assert status == 0, out
        listed = json.loads(out[out.index("{") :])
        assert [t["name"] for t in listed["tools"]] == list(PROFILES["default"])
        assert all(t["description"] and t["inputSchema"] for t in listed["tools"])

        status, out = await run_inspector(
            inspector, url, tokens["alice"], "--method", "tools/call", "--tool-name", "whoami"
        )
        assert status == 0, out
        assert tool_json(out)["id"] == "alice"

        status, out = await run_inspector(
            inspector,
            url,
            tokens["alice"],
            "--method",
            "tools/call",
            "--tool-name",
            "send_message",
            "--tool-arg",
            "to=bob",
            "kind=task",
            "subject=from the inspector",
            "body=hello bob",
        )
        assert status == 0, out
        sent = tool_json(out)
        assert sent["from_id"] == "alice"

        async with http_client(url, tokens["bob"]) as bob:
            inbox = data(await bob.call_tool("check_inbox", {}))
        assert [(m["id"], m["subject"]) for m in inbox["messages"]] == [
            (sent["id"], "from the inspector")
        ]

        status, out = await run_inspector(
            inspector, f"{url}?profile=mail", "pt_wrong", "--method", "tools/list"
        )
        assert status != 0
        assert "invalid_token" in out
