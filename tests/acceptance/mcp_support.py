"""Helpers for the MCP acceptance tests: agents made in a data root, the hub's web app served
by a uvicorn subprocess on it, and the stdio server as its own subprocess."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

from parley.bootstrap import build_hub
from parley.config import Settings
from parley.service.identity import AgentSpec
from tests.conftest import free_port

START_TIMEOUT_S = 60.0
# Variables that would point a child process at another hub, data root, database or agent.
ISOLATED_VARS = ("PARLEY_HOME", "PARLEY_URL", "PARLEY_TOKEN", "PARLEY_DATABASE_URL")


def child_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a child process that uses the data root of ``settings``."""
    env = {k: v for k, v in os.environ.items() if k not in ISOLATED_VARS}
    env["PARLEY_HOME"] = str(settings.data_root())
    env["PARLEY_DATABASE_URL"] = settings.resolved_database_url()
    env.update(extra)
    return env


async def create_agents(
    settings: Settings,
    *ids: str,
    runtime: dict[str, Any] | None = None,
    workspaces: Path | None = None,
    accepts_channels_from: list[str] | None = None,
) -> dict[str, str]:
    """Create agents with a hub that is stopped again before returning (a SQLite data root
    admits one hub at a time); returns each agent's token. With ``workspaces`` each agent
    gets the directory ``workspaces/<id>``; ``accepts_channels_from`` is whom each lets add it
    to channels (nobody by default)."""
    hub = build_hub(settings)
    await hub.start(background=False)
    try:
        assert hub.operator_token is not None
        operator = await hub.identity.authenticate(hub.operator_token)
        tokens = {}
        for agent_id in ids:
            spec = AgentSpec(
                id=agent_id,
                runtime=runtime or {"kind": "none"},
                accepts_channels_from=accepts_channels_from or [],
            )
            if workspaces is not None:
                (workspaces / agent_id).mkdir(parents=True, exist_ok=True)
                spec.workspace = str(workspaces / agent_id)
            created = await hub.identity.create_agent(operator, spec)
            tokens[agent_id] = created.token
        return tokens
    finally:
        await hub.stop()


@asynccontextmanager
async def hub_process(settings: Settings) -> AsyncIterator[str]:
    """The hub's web app (REST and /mcp) in a uvicorn subprocess; yields its base URL once
    uvicorn says it is listening."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "parley.surfaces.rest.app:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "info",
        "--no-access-log",
        env=child_env(settings),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    stderr = proc.stderr
    lines: list[str] = []
    listening = asyncio.Event()

    async def drain() -> None:
        # Keep reading to the end: a full pipe would block the hub.
        while line := await stderr.readline():
            lines.append(line.decode(errors="replace"))
            if b"Uvicorn running on" in line:
                listening.set()

    drainer = asyncio.create_task(drain())
    ready = asyncio.create_task(listening.wait())
    await asyncio.wait({ready, drainer}, timeout=START_TIMEOUT_S, return_when="FIRST_COMPLETED")
    try:
        if not listening.is_set():
            raise AssertionError("the hub did not start:\n" + "".join(lines))
        yield f"http://127.0.0.1:{port}"
    finally:
        ready.cancel()
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        await drainer


def stdio_server(env: dict[str, str], *args: str) -> StdioServerParameters:
    """``python -m parley.surfaces.mcp.stdio`` as the SDK's stdio client starts it."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "parley.surfaces.mcp.stdio", *args], env=env
    )


async def run_stdio_to_exit(env: dict[str, str]) -> tuple[int, str]:
    """Run the stdio server with no client (stdin closed); returns its exit status and
    stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "parley.surfaces.mcp.stdio",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), START_TIMEOUT_S)
    assert out == b"", "stdout carries MCP messages only"
    assert proc.returncode is not None
    return proc.returncode, err.decode()
