"""A refused summaryPath says that it lies outside the workspace (or is missing) without saying
where it leads: a symlink to ``/proc/self/cwd`` or ``/proc/self/fd/<n>`` must not tell an agent
the hub's working directory or its database path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.config import Settings
from parley.core.channels import Channel
from parley.core.runtime import NO_REPLY
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import AgentHandle, MakeAgent

PROC = Path("/proc/self")
needs_proc = pytest.mark.skipif(not PROC.is_dir(), reason="needs /proc")


@pytest.fixture
async def lead(make_agent: MakeAgent, runtimes: StaticRuntimes, tmp_path: Path) -> AgentHandle:
    runtimes.set("lead", ScriptedRuntime(lambda _turn: NO_REPLY))
    return await make_agent("lead", runtime={"kind": "scripted"}, workspace=str(tmp_path / "ws"))


async def open_discussion(hub: Hub, lead: AgentHandle) -> Channel:
    principal = lead.principal
    channel = await hub.discussions.create_private_channel(
        principal, "design", [], principal.work_channel_id, "Pick a design"
    )
    await hub.tasks.wait_idle()
    return channel


def hub_secrets(settings: Settings) -> list[str]:
    """Paths an agent must not learn: where the hub runs and where its data lives."""
    return [os.getcwd(), str(settings.data_root())]


def fd_to(path: Path) -> int | None:
    """A descriptor of this process (which runs the in-process hub) open on ``path``."""
    for entry in (PROC / "fd").iterdir():
        try:
            if Path(os.readlink(entry)) == path:
                return int(entry.name)
        except OSError:
            continue
    return None


@needs_proc
async def test_a_symlink_escape_does_not_reveal_where_it_leads(
    hub: Hub, lead: AgentHandle, api: Any, settings: Settings, backend: str
) -> None:
    channel = await open_discussion(hub, lead)
    workspace = Path(lead.principal.workspace or "")
    (workspace / "cwd").symlink_to(PROC / "cwd")
    tries = ["cwd/x.md", "cwd", str(PROC / "cwd"), str(PROC / "cwd" / "x.md")]
    if backend == "sqlite":
        database = settings.data_root() / "parley.db"
        fd = fd_to(database)
        assert fd is not None, "the in-process hub holds its database open"
        (workspace / "db").symlink_to(PROC / "fd" / str(fd))
        tries += ["db", str(PROC / "fd" / str(fd))]
    client = api(lead.token)
    for path in tries:
        r = await client.post(f"/v1/channels/{channel.id}/callback", json={"summaryPath": path})
        assert (r.status_code, r.json()["code"]) == (403, "summary_outside_workspace"), r.text
        assert repr(path) in r.json()["message"]  # what the caller gave is echoed
        assert "outside the workspace" in r.json()["message"]
        for secret in hub_secrets(settings):
            assert secret not in r.text, (path, r.text)


async def test_a_missing_summary_names_only_what_the_caller_gave(
    hub: Hub, lead: AgentHandle, api: Any
) -> None:
    channel = await open_discussion(hub, lead)
    workspace = Path(lead.principal.workspace or "")
    (workspace / "hidden-target-dir").mkdir()
    (workspace / "link.md").symlink_to(workspace / "hidden-target-dir" / "nothing-here.md")
    r = await api(lead.token).post(
        f"/v1/channels/{channel.id}/callback", json={"summaryPath": "link.md"}
    )
    assert (r.status_code, r.json()["code"]) == (404, "summary_missing"), r.text
    assert "'link.md'" in r.json()["message"]
    assert "hidden-target-dir" not in r.text
    assert "nothing-here" not in r.text
