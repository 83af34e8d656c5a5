"""The event log and a channel's transcript read as a person reads history: the newest first
(events) or the newest page (messages) with times, older pages on request, and ``--follow``
starting from now — through the real ``parley`` CLI against a real ``parley serve``."""

from __future__ import annotations

import json
import subprocess

from tests.acceptance.cli_support import Cli, LineReader, ServedHub, child_env, parley_executable


def test_events_are_newest_first_paged_by_before_and_limited_by_since(cli: Cli) -> None:
    for name in ("alice", "bob", "carol"):
        cli.json("agent", "add", name)
    newest = cli.json("events", "--type", "agent.created", "--limit", "2")
    assert [e["subject"] for e in newest] == ["carol", "bob"]
    older = cli.ok("events", "--type", "agent.created", "--limit", "2", "--before", newest[1]["id"])
    assert "alice" in older.stdout and "bob" not in older.stdout
    hint = cli.ok("events", "--type", "agent.created", "--limit", "2", "--json")
    assert f"--before {newest[1]['id']}" in hint.stderr
    assert cli.json("events", "--since", "1h", "--type", "agent.created", "--limit", "10")
    assert cli.json("events", "--since", "2000-01-01T00:00", "--type", "agent.") != []
    assert cli.json("events", "--since", "2999-01-01T00:00") == []
    bad = cli.run("events", "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr
    # For scripts, --after still reads forward, oldest first.
    everything = cli.json("events", "--limit", "1000")
    oldest = everything[-1]
    assert oldest["type"] == "principal.created"
    forward = cli.json("events", "--after", oldest["id"], "--limit", "1000")
    assert [e["id"] for e in forward] == [e["id"] for e in reversed(everything[:-1])]


def follow(hub: ServedHub, *args: str) -> tuple[subprocess.Popen[str], LineReader, LineReader]:
    proc = subprocess.Popen(
        [parley_executable(), "--home", str(hub.home), "events", "--follow", "--json", *args],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    return proc, LineReader(proc.stdout), LineReader(proc.stderr)


def test_follow_starts_from_now_unless_from_start(cli: Cli, hub: ServedHub) -> None:
    cli.json("agent", "add", "alice")
    proc, out, err = follow(hub)
    try:
        err.wait_for(lambda line: line.startswith("following the event log"), 60)
        cli.json("agent", "add", "bob")
        line = json.loads(out.wait_for(lambda line: line.startswith("{"), 60))
        assert line["event"] == "event"
        assert (line["data"]["type"], line["data"]["subject"]) == ("agent.created", "bob")
    finally:
        proc.terminate()
        proc.wait(20)
    proc, out, err = follow(hub, "--from-start")
    try:
        first = json.loads(out.wait_for(lambda line: line.startswith("{"), 60))["data"]
        assert first["type"] == "principal.created"
    finally:
        proc.terminate()
        proc.wait(20)


def test_channel_messages_show_times_and_page_backwards(cli: Cli) -> None:
    channel = cli.json("channel", "create", "--name", "log")
    for i in range(1, 6):
        cli.json("channel", "post", channel["id"], f"note {i}")
    newest = cli.ok("channel", "messages", channel["id"], "--limit", "2")
    lines = [line for line in newest.stdout.splitlines() if "note" in line]
    assert [line.split(": ")[-1] for line in lines] == ["note 4", "note 5"]
    # Each line starts with the time it was posted.
    assert all(line[:2].isdigit() and line[2] == ":" for line in lines), lines
    assert "--before 4" in newest.stderr
    page = cli.json("channel", "messages", channel["id"], "--limit", "2", "--before", "4")
    assert [m["content"] for m in page] == ["note 2", "note 3"]
    first = cli.json("channel", "messages", channel["id"], "--before", "2")
    assert [m["content"] for m in first] == ["note 1"]
    assert cli.json("channel", "messages", channel["id"], "--before", "1") == []
