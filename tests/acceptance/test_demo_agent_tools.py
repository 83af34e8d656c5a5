"""``parley demo`` with an OpenAI-compatible endpoint: the agents open the discussion, write the
summary and call back themselves, through the hub's tools. The endpoint is a fake that plays a
model's tool calls; the demo and its hub run as a real subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

from tests.fakes.model_server import FakeCall, FakeReply
from tests.fakes.openai_server import FakeOpenAIServer

PARLEY = str(Path(sys.executable).with_name("parley"))
SUMMARY = "queue-design-summary.md"
SUMMARY_TEXT = "# Summary: queue design\n\nPriority plus aging; the burst test asserts 5 minutes.\n"


def respond(request: dict[str, Any]) -> FakeReply:
    """A model that does what the demo asks: it reads who it is and what it has already done
    from the conversation the runtime sent."""
    messages = request["messages"]
    system, user = messages[0]["content"], messages[1]["content"]
    found = re.search(r"\(id ([\w-]+)\)", system)
    agent = found.group(1) if found else "?"
    called = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if "This is your work channel" in system:
        if "[Discussion Result Ready]" in user:
            return FakeReply(text="Read the summary; continuing with priority aging.")
        if not called:
            return FakeReply(text="", calls=[FakeCall("whoami")])
        if called[-1] == "whoami":
            work = json.loads(results[-1])["work_channel_id"]
            return FakeReply(
                text="",
                calls=[
                    FakeCall(
                        "create_private_channel",
                        {
                            "name": "queue-design",
                            "members": ["reviewer", "tester"],
                            "callbackChannelId": work,
                            "discussGuide": "Choose the job queue design.",
                        },
                    )
                ],
            )
        return FakeReply(text="Opened the discussion queue-design.")
    if agent == "planner" and "the rounds are over" in user:
        if not called:
            return FakeReply(
                text="", calls=[FakeCall("write_file", {"path": SUMMARY, "content": SUMMARY_TEXT})]
            )
        if called[-1] == "write_file":
            return FakeReply(
                text="", calls=[FakeCall("discuss_callback", {"summaryPath": SUMMARY})]
            )
        return FakeReply(text="Summary written; the discussion is closed.")
    return FakeReply(text=f"{agent}: priority plus aging bounds the wait. [[DISCUSSION_DONE]]")


def events(db: Path) -> list[tuple[str, str, dict[str, Any]]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT type, actor, payload FROM events ORDER BY id").fetchall()
    return [(kind, actor, json.loads(payload)) for kind, actor, payload in rows]


async def test_demo_agents_open_summarise_and_call_back_with_tools(tmp_path: Path) -> None:
    async with FakeOpenAIServer() as model:
        model.responder = respond
        env = {
            **os.environ,
            "PARLEY_HOME": str(tmp_path / "home"),
            "COLUMNS": "200",
            "PARLEY_OPENAI_BASE_URL": model.base_url,
            "PARLEY_OPENAI_MODEL": "fake-model",
            "PARLEY_OPENAI_API_KEY": "test-key",
        }
        demo = await asyncio.create_subprocess_exec(
            PARLEY,
            "demo",
            "--exit-after",
            env=env,
            cwd=tmp_path,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(demo.communicate(), timeout=180)
    out = stdout.decode()
    assert demo.returncode == 0, stderr.decode()[-3000:] + out[-3000:]
    assert "openai-compatible model fake-model" in out
    assert "opened by planner" in out
    assert "403 not_initiator" in out
    assert "callback accepted: status=closed" in out
    assert "[Discussion Result Ready]" in out
    assert "demo complete" in out

    home = tmp_path / "home" / "demo"
    summary = home / "workspaces" / "planner" / SUMMARY
    assert summary.read_text() == SUMMARY_TEXT
    assert stat.S_IMODE(summary.stat().st_mode) == 0o600
    log = events(home / "parley.db")
    calls = [(actor, p["tool"], p["ok"]) for kind, actor, p in log if kind == "agent.tool_called"]
    for step in ("create_private_channel", "write_file", "discuss_callback"):
        assert ("planner", step, True) in calls, calls
    # The discussion was opened and finished by planner, not by the demo or the operator.
    created = [
        actor
        for kind, actor, p in log
        if kind == "channel.created" and p.get("kind") == "discussion"
    ]
    completed = [actor for kind, actor, _ in log if kind == "discussion.completed"]
    assert created == ["planner"] and completed == ["planner"], (created, completed)
