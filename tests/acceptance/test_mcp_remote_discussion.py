"""THE end-to-end test of remote agents (S3, W9 ``remote``, C3–C9): a real hub process and three
agents, each its own OS process running ``remote_agent.py`` with its own MCP client over
Streamable HTTP and its own token. Nothing is scripted inside the hub: the initiator opens the
discussion from its work channel, all three take turns and vote in round 2, the initiator writes
its summary inside its workspace and calls back, and the result-ready message wakes it with a
turn in its work channel. The test then checks the stored transcript and each agent's output."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from parley.config import Settings
from parley.core.runtime import DONE_MARKER
from tests.acceptance.mcp_support import child_env, create_agents, hub_process

AGENT_SCRIPT = Path(__file__).with_name("remote_agent.py")
AGENTS = ("ini", "bob", "cat")
RUN_TIMEOUT_S = 180.0
POLL_LIMIT = 2000


@asynccontextmanager
async def agent_processes(
    settings: Settings, url: str, tokens: dict[str, str]
) -> AsyncIterator[dict[str, asyncio.subprocess.Process]]:
    """One ``remote_agent.py`` process per agent; any still running on the way out is killed."""
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        for agent_id in AGENTS:
            args = ["--url", url]
            if agent_id == "ini":
                args += ["--open", "bob,cat"]
            procs[agent_id] = await asyncio.create_subprocess_exec(
                sys.executable,
                str(AGENT_SCRIPT),
                *args,
                env=child_env(settings, PARLEY_TOKEN=tokens[agent_id]),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        yield procs
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def run_to_exit(proc: asyncio.subprocess.Process) -> tuple[int, list[dict[str, Any]], str]:
    out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    assert proc.returncode is not None
    events = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    return proc.returncode, events, err.decode(errors="replace")


async def get(http: httpx.AsyncClient, path: str) -> Any:
    response = await http.get(path)
    assert response.status_code == 200, response.text
    return response.json()


async def wake_task_finished(http: httpx.AsyncClient, work: str) -> dict[str, Any]:
    """The work channel's wake task once it has finished: the hub commits it right after the
    initiator's answer, which may be a moment after the agent process has exited."""
    for _ in range(POLL_LIMIT):
        tasks = await get(http, f"/v1/channels/{work}/tasks")
        if tasks and tasks[-1]["status"] == "finished":
            return dict(tasks[-1])
        await asyncio.sleep(0.01)
    raise AssertionError("the wake task never finished")


async def test_three_remote_agents_hold_a_discussion_over_mcp(
    settings: Settings, tmp_path: Path
) -> None:
    workspaces = tmp_path / "workspaces"
    tokens = await create_agents(
        settings,
        *AGENTS,
        runtime={"kind": "remote"},
        workspaces=workspaces,
        accepts_channels_from=["ini"],
    )
    async with hub_process(settings) as url, agent_processes(settings, url, tokens) as procs:
        results = await asyncio.gather(*(run_to_exit(procs[a]) for a in AGENTS))
        outputs = dict(zip(AGENTS, results, strict=True))
        for agent_id, (status, events, err) in outputs.items():
            assert status == 0, f"{agent_id} failed: {events}\n{err}"

        headers = {"Authorization": f"Bearer {tokens['ini']}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            ini_events = {e["event"]: e for e in outputs["ini"][1]}
            disc = ini_events["opened"]["channel_id"]
            work = ini_events["ready"]["work_channel_id"]
            channel = await get(http, f"/v1/channels/{disc}")
            disc_messages = await get(http, f"/v1/channels/{disc}/messages")
            disc_tasks = await get(http, f"/v1/channels/{disc}/tasks")
            wake_task = await wake_task_finished(http, work)
            work_messages = await get(http, f"/v1/channels/{work}/messages")

    # The stored transcript: kickoff, two full rounds in member order, the moderator's end.
    assert channel["kind"] == "discussion"
    assert channel["members"] == list(AGENTS)
    assert disc_messages[0]["sender_kind"] == "moderator"
    assert disc_messages[0]["content"].startswith("[Discussion Started]")
    spoken = [m for m in disc_messages if m["sender_kind"] == "agent"]
    assert [(m["sender_id"], m["round"]) for m in spoken] == [
        (agent_id, number) for number in (1, 2) for agent_id in AGENTS
    ]
    for message in spoken:
        assert DONE_MARKER not in message["content"]  # votes are stripped before posting
    for message in spoken[3:]:
        others = set(AGENTS) - {message["sender_id"]}
        assert all(other in message["content"] for other in others), message["content"]
    assert disc_messages[-1]["sender_kind"] == "moderator"
    assert "every participant voted to end in the same round" in disc_messages[-1]["content"]
    [task] = disc_tasks
    assert (task["end_reason"], task["current_round"], task["accepted"]) == ("unanimous", 2, 6)

    # Closed through the initiator's callback, with the summary inside its workspace.
    summary = (workspaces / "ini" / "discussions" / "summary-names.md").resolve()
    meta = channel["metadata"]
    assert channel["status"] == "closed"
    assert (meta["status"], meta["initiatorAgentId"], meta["originChannelId"]) == (
        "closed",
        "ini",
        work,
    )
    assert meta["summaryPath"] == str(summary)
    assert meta["completedAt"]
    assert "bob, round 2" in summary.read_text()

    # The result-ready message woke the initiator in its work channel, and it answered.
    ready, answer = work_messages[-2:]
    assert ready["sender_kind"] == "moderator"
    assert ready["content"].startswith("[Discussion Result Ready]")
    assert str(summary) in ready["content"]
    assert (answer["sender_id"], answer["content"]) == ("ini", "Summary read; back to my task.")
    assert (wake_task["mode"], wake_task["end_reason"]) == ("wake", "replied")

    # Each agent's own account of the run.
    ini = outputs["ini"][1]
    assert [e["event"] for e in ini] == [
        "ready",
        "opened",
        "spoke",
        "spoke",
        "rounds_ended",
        "callback",
        "woken",
        "done",
    ]
    assert ini[4]["end_reason"] == "unanimous"
    assert ini[5] == {"event": "callback", "status": "closed", "summary_path": str(summary)}
    assert ini[6] == {
        "event": "woken",
        "channel_id": work,
        "prompt_names_summary": True,
        "noticed_in_inbox": True,
    }
    for agent_id in ("bob", "cat"):
        events = outputs[agent_id][1]
        assert [e["event"] for e in events] == ["ready", "spoke", "spoke", "done"]
        assert [(e["round"], e["channel_id"]) for e in events[1:3]] == [(1, disc), (2, disc)]
        assert sorted(events[2]["heard"]) == sorted(set(AGENTS) - {agent_id})
