"""Channels, groups, discussions and tasks through the real ``parley`` CLI against a real
``parley serve`` process, with scripted agents."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.acceptance.cli_support import (
    Cli,
    LineReader,
    ServedHub,
    child_env,
    parley_executable,
)


def scripted(
    cli: Cli, agent_id: str, replies: list[Any], accepts: tuple[str, ...] = (), **extra: Any
) -> str:
    """A scripted agent that lets ``accepts`` add it to channels (the operator always may)."""
    runtime = json.dumps({"replies": replies, **extra})
    consent = [arg for who in accepts for arg in ("--accept-channels-from", who)]
    created = cli.json(
        "agent", "add", agent_id, "--runtime", "scripted", "--runtime-json", runtime, *consent
    )
    return str(created["token"])


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def watcher(hub: ServedHub, *args: str) -> tuple[subprocess.Popen[str], LineReader]:
    proc = subprocess.Popen(
        [parley_executable(), "--home", str(hub.home), *args],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, LineReader(proc.stdout)


def test_group_discussion_watched_to_its_end(cli: Cli) -> None:
    scripted(cli, "alice", ["I prefer A", "A then [[DISCUSSION_DONE]]"])
    scripted(cli, "bob", ["I prefer B", "fine, A [[DISCUSSION_DONE]]"])
    group = cli.json(
        "group",
        "create",
        "--name",
        "design",
        "--member",
        "alice",
        "--member",
        "bob",
        "--rounds",
        "3",
    )
    assert (group["kind"], group["discussion_rounds"]) == ("group", 3)
    assert {"alice", "bob"} <= set(group["members"])

    out = cli.ok("group", "post", group["id"], "A or B?", "--watch", "--json").stdout
    lines = json_lines(out)
    # Every line has one shape: what happened and the API's object.
    assert all(set(line) == {"event", "data"} for line in lines), lines
    posted, events = lines[0]["data"], lines[1:]
    assert lines[0]["event"] == "posted"
    assert posted["message"]["content"] == "A or B?" and posted["task_id"]
    spoken = [
        (e["data"]["sender_id"], e["data"]["round"]) for e in events if e["event"] == "message"
    ]
    assert spoken == [("alice", 1), ("bob", 1), ("alice", 2), ("bob", 2)]
    assert events[-1]["event"] == "task"
    final = events[-1]["data"]
    assert (final["id"], final["status"], final["end_reason"]) == (
        posted["task_id"],
        "finished",
        "unanimous",
    )

    messages = cli.json("channel", "messages", group["id"])
    assert [m["seq"] for m in messages] == [1, 2, 3, 4, 5]
    assert messages[2]["content"] == "I prefer B"
    assert [
        m["content"] for m in cli.json("channel", "messages", group["id"], "--latest", "1")
    ] == ["fine, A"]
    assert [t["id"] for t in cli.json("channel", "tasks", group["id"])] == [posted["task_id"]]
    shown = cli.json("task", "show", posted["task_id"], "--invocations")
    assert shown["task"]["accepted"] == 4
    assert [i["outcome"] for i in shown["invocations"]] == ["accepted"] * 4
    assert group["id"] in {c["id"] for c in cli.json("channel", "list")}
    assert cli.json("channel", "show", group["id"])["last_seq"] == 5

    # Readable: the transcript with speakers and rounds; nothing runs, so watch returns.
    readable = cli.ok("group", "watch", group["id"]).stdout
    assert "[r1] alice: I prefer A" in readable
    assert "[r2] bob: fine, A" in readable
    assert "no discussion is running" in readable


def test_group_watch_follows_a_superseding_message(cli: Cli, hub: ServedHub) -> None:
    # alice's first turn hangs until the newer message supersedes it; her next turn answers.
    scripted(cli, "alice", [{"hang": True}, "fresh answer"], timeout_s=60)
    scripted(cli, "bob", ["bob agrees"])
    group = cli.json(
        "group", "create", "--name", "g", "--member", "alice", "--member", "bob", "--rounds", "1"
    )
    first = cli.json("channel", "post", group["id"], "first question")
    proc, lines = watcher(hub, "group", "watch", group["id"], "--json")
    try:
        lines.wait_for(lambda line: '"first question"' in line, 60)
        second = cli.json("channel", "post", group["id"], "second question")
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
        lines.until_end(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [json.loads(line) for line in lines.lines]
    tasks = [
        e["data"] for e in events if e["event"] == "task" and e["data"]["status"] == "finished"
    ]
    assert [(t["id"], t["end_reason"]) for t in tasks] == [
        (first["task_id"], "superseded"),
        (second["task_id"], "max_rounds"),
    ]
    spoken = [e["data"]["content"] for e in events if e["event"] == "message"]
    assert spoken[-2:] == ["fresh answer", "bob agrees"]


def test_task_cancel(cli: Cli) -> None:
    scripted(cli, "alice", [{"hang": True}], timeout_s=60)
    group = cli.json("group", "create", "--name", "slow", "--member", "alice", "--rounds", "1")
    posted = cli.json("group", "post", group["id"], "take your time")
    cancelled = cli.json("task", "cancel", posted["task_id"])
    assert cancelled["id"] == posted["task_id"]
    lines = json_lines(cli.ok("group", "watch", group["id"], "--latest", "0", "--json").stdout)
    finished = cli.json("task", "show", posted["task_id"])
    assert (finished["status"], finished["end_reason"]) == ("finished", "cancelled")
    assert all(line["event"] in ("message", "task") for line in lines)
    # Shown as a person reads it: the channel by its name.
    assert f"#slow ({group['id']})" in cli.ok("task", "show", posted["task_id"]).stdout


def test_discussion_start_status_callback(cli: Cli, tmp_path: Path) -> None:
    workspace = tmp_path / "carol-ws"
    workspace.mkdir()
    scripted(cli, "alice", ["position A"], accepts=("carol",), cycle=True)
    scripted(cli, "bob", ["position B"], accepts=("carol",), cycle=True)
    carol = cli.json("agent", "add", "carol", "--workspace", str(workspace))
    token = carol["token"]
    origin = carol["principal"]["work_channel_id"]

    refused = cli.run("discuss", "start", "--member", "alice", "--guide", "Pick a plan")
    assert refused.returncode == 2, "the operator has no work channel to report back to"
    assert "--origin" in refused.stderr

    started = cli.json(
        "discuss", "start", "--member", "alice", "--member", "bob", "--guide",
        "Pick the API versioning plan", token=token,
    )  # fmt: skip
    meta = started["metadata"]
    assert started["kind"] == "discussion"
    assert started["name"] == "discuss-pick-the-api-versioning-plan"
    assert (meta["initiatorAgentId"], meta["originChannelId"], meta["status"]) == (
        "carol",
        origin,
        "active",
    )
    status = cli.json("discuss", "status", started["id"])
    assert status["channel"]["metadata"]["discussGuide"] == "Pick the API versioning plan"

    cli.fails("discuss", "callback", started["id"], "../escape.md", token=token,
              code="summary_outside_workspace")  # fmt: skip
    cli.fails("discuss", "callback", started["id"], "summary.md", token=token,
              code="summary_missing")  # fmt: skip
    (workspace / "summary.md").write_text("We pick URL versioning.\n")
    done = cli.json("discuss", "callback", started["id"], "summary.md", token=token)
    assert done["metadata"]["status"] == "closed"
    assert done["metadata"]["summaryPath"] == str((workspace / "summary.md").resolve())
    second = cli.run("discuss", "callback", started["id"], "summary.md", token=token)
    assert second.returncode == 1 and second.stderr.startswith("error ["), second.stderr

    told = cli.json("channel", "messages", origin, token=token)
    assert any(str(workspace / "summary.md") in m["content"] for m in told)


def test_operator_force_closes_a_discussion(cli: Cli) -> None:
    scripted(cli, "alice", ["hmm"], accepts=("carol",), cycle=True)
    carol = cli.json("agent", "add", "carol")
    started = cli.json(
        "discuss", "start", "--member", "alice", "--guide", "Stale topic", "--name", "stale",
        token=carol["token"],
    )  # fmt: skip
    cli.fails("discuss", "close", started["id"], "--reason", "no", token=carol["token"],
              code="operator_only")  # fmt: skip
    closed = cli.json("discuss", "close", started["id"], "--reason", "went stale")
    assert closed["metadata"]["status"] == "closed"
    readable = cli.ok("discuss", "status", started["id"]).stdout
    assert "closed" in readable and "Stale topic" in readable


def test_direct_channel_post_and_watch(cli: Cli, hub: ServedHub) -> None:
    cli.json("agent", "add", "alice")
    dm = cli.json("channel", "create", "--name", "dm", "--kind", "direct", "--member", "alice")
    assert dm["kind"] == "direct"
    assert cli.run("channel", "create", "--name", "x", "--kind", "meeting").returncode == 2
    posted = cli.ok("channel", "post", dm["id"], "[hello] alice").stdout
    assert f"posted {posted.split()[1]} (#1)" in posted
    proc, lines = watcher(hub, "channel", "watch", dm["id"], "--json")
    try:
        seen = json.loads(lines.wait_for(lambda line: line.startswith("{"), 60))
        assert (seen["event"], seen["data"]["content"]) == ("message", "[hello] alice")
        cli.ok("channel", "post", dm["id"], "second")
        live = json.loads(lines.wait_for(lambda line: line.startswith("{"), 60))
        assert (live["data"]["seq"], live["data"]["content"]) == (2, "second")
        assert proc.poll() is None, "channel watch follows until stopped"
    finally:
        proc.terminate()
        proc.wait(20)
    readable = cli.ok("channel", "messages", dm["id"]).stdout
    assert "operator (human): [hello] alice" in readable
