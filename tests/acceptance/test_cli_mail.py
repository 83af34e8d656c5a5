"""Agents, tokens, mail, mailroom and events through the real ``parley`` CLI against a real
``parley serve`` process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.acceptance.cli_support import (
    Cli,
    LineReader,
    ServedHub,
    child_env,
    parley_executable,
    served_hub,
)


def add_agent(cli: Cli, agent_id: str, *args: str) -> str:
    created = cli.json("agent", "add", agent_id, *args)
    assert created["principal"]["id"] == agent_id
    return str(created["token"])


def test_agent_add_list_show(cli: Cli, tmp_path: Path) -> None:
    readable = cli.ok(
        "agent",
        "add",
        "alice",
        "--name",
        "Alice",
        "--workspace",
        str(tmp_path),
        "--runtime",
        "scripted",
        "--runtime-json",
        '{"replies": ["hi"], "cycle": true}',
    )
    assert "token for alice" in readable.stdout
    assert "shown only once" in readable.stdout
    token = next(w for w in readable.stdout.split() if w.startswith("pt_"))
    assert cli.json("whoami", token=token)["id"] == "alice"

    add_agent(cli, "bob", "--persona", "terse reviewer")
    agents = cli.json("agent", "list")
    assert [(a["id"], a["display_name"], a["runtime"]["kind"]) for a in agents] == [
        ("alice", "Alice", "scripted"),
        ("bob", "bob", "none"),
    ]
    shown = cli.json("agent", "show", "alice")
    assert shown["workspace"] == str(tmp_path.resolve())
    assert shown["runtime"] == {"kind": "scripted", "replies": ["hi"], "cycle": True}
    table = cli.ok("agent", "list").stdout
    assert "alice" in table and "scripted" in table

    cli.fails("agent", "add", "alice", code="agent_exists")
    cli.fails("agent", "show", "nobody", code="principal_not_found")
    cli.fails("agent", "add", "carol", token=token, code="operator_only")


def test_agent_add_usage_errors_exit_2(cli: Cli) -> None:
    bad_json = cli.run("agent", "add", "x", "--runtime-json", "{nope")
    assert bad_json.returncode == 2
    assert "--runtime-json" in bad_json.stderr
    bad_kind = cli.run("agent", "add", "x", "--runtime", "telepathy")
    assert bad_kind.returncode == 2
    assert cli.json("agent", "list") == []


def test_token_issue_and_rotate(cli: Cli) -> None:
    first = add_agent(cli, "alice")
    second = cli.json("token", "issue", "alice")["token"]
    assert cli.json("whoami", token=first)["id"] == cli.json("whoami", token=second)["id"]
    rotated = cli.json("token", "issue", "alice", "--rotate")
    assert rotated["principal_id"] == "alice"
    assert cli.json("whoami", token=rotated["token"])["id"] == "alice"
    refused = cli.fails("whoami", token=first, code="invalid_token")
    assert "not valid" in refused.stderr


def test_mail_lifecycle_with_json(cli: Cli) -> None:
    alice = add_agent(cli, "alice")
    add_agent(cli, "bob")
    sent = cli.json(
        "mail",
        "send",
        "alice",
        "--kind",
        "task",
        "--subject",
        "[W1] fix the parser",
        "--body",
        "Fix **it**.",
        "--label",
        "W1",
        "--cc",
        "bob",
        "--correlation",
        "wave-1",
        "--idempotency-key",
        "k1",
    )
    assert (sent["kind"], sent["from_id"], sent["recipient_id"]) == ("task", "operator", "alice")
    assert sent["labels"] == ["W1"] and sent["cc"] == ["bob"]
    again = cli.json("mail", "send", "alice", "--kind", "task", "--idempotency-key", "k1")
    assert again["id"] == sent["id"], "an idempotency key returns the original"

    inbox = cli.json("mail", "inbox", token=alice)
    assert [m["id"] for m in inbox] == [sent["id"]]
    assert cli.json("mail", "inbox", "alice", "--unread")[0]["id"] == sent["id"]
    assert cli.json("mail", "summary", "alice")["unread"] == 1

    assert cli.json("mail", "ack", sent["id"], token=alice)["status"] == "read"
    assert cli.json("mail", "inbox", "alice", "--unread") == []
    assert cli.json("mail", "start", sent["id"], token=alice)["status"] == "in_progress"
    summary = cli.json("mail", "summary", token=alice)
    assert (summary["agent_id"], summary["unread"], summary["in_progress"]) == ("alice", 0, 1)
    closed = cli.json("mail", "close", sent["id"], "--label", "W1", token=alice)
    assert (closed["status"], closed["archive_label"]) == ("closed", "W1")
    assert cli.json("mail", "inbox", token=alice) == []
    assert [m["id"] for m in cli.json("mail", "inbox", "--all", token=alice)] == [sent["id"]]

    moved_back = cli.fails("mail", "ack", sent["id"], token=alice, code="backward_transition")
    assert "closed" in moved_back.stderr
    cli.fails("mail", "inbox", "bob", token=alice, code="inbox_forbidden")

    copy = cli.json("mail", "redeliver", sent["id"])
    assert copy["id"] != sent["id"] and copy["status"] == "pending"
    everyone = {s["agent_id"]: s for s in cli.json("mail", "summary")}
    assert set(everyone) == {"operator", "alice", "bob"}
    assert everyone["alice"]["unread"] == 1

    shown = cli.json("mail", "show", sent["id"])
    assert shown["body"] == "Fix **it**."
    thread = cli.json("mail", "thread", sent["id"])
    assert sent["id"] in {m["id"] for m in thread}
    readable = cli.ok("mail", "show", sent["id"]).stdout
    assert "[W1] fix the parser" in readable, "markup-like subjects are printed as they are"


def test_mail_body_from_file_and_stdin(cli: Cli, tmp_path: Path) -> None:
    alice = add_agent(cli, "alice")
    body_file = tmp_path / "body.md"
    body_file.write_text("# Report\n\nall green ✓\n", encoding="utf-8")
    from_file = cli.json("mail", "send", "alice", "--kind", "report", "--body-file", str(body_file))
    assert from_file["body"] == "# Report\n\nall green ✓\n"
    from_stdin = cli.json(
        "mail", "send", "alice", "--kind", "notice", "--body-file", "-", input="piped\n"
    )
    assert from_stdin["body"] == "piped\n"
    both = cli.run("mail", "send", "alice", "--body", "x", "--body-file", str(body_file))
    assert both.returncode == 2
    for payload in ("{nope", "[1, 2]"):
        # A payload is a JSON object: anything else is a usage error before any request.
        refused = cli.run("mail", "send", "alice", "--kind", "notice", "--payload", payload)
        assert refused.returncode == 2
        assert "--payload" in refused.stderr
    cli.fails("mail", "send", "alice", "--kind", "gossip", code="unknown_kind")
    assert len(cli.json("mail", "inbox", token=alice)) == 2


def test_mail_watch_follows_the_inbox(cli: Cli, hub: ServedHub) -> None:
    alice = add_agent(cli, "alice")
    first = cli.json("mail", "send", "alice", "--subject", "before")
    command = [parley_executable(), "--home", str(hub.home), "--token", alice]
    watcher = subprocess.Popen(
        [*command, "mail", "watch", "--json"],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        lines = LineReader(watcher.stdout)
        seen = json.loads(lines.wait_for(lambda line: line.startswith("{"), 60))
        assert seen["event"] == "mail" and seen["data"]["id"] == first["id"]
        second = cli.json("mail", "send", "alice", "--subject", "live one")
        live = json.loads(lines.wait_for(lambda line: line.startswith("{"), 60))["data"]
        assert (live["id"], live["subject"]) == (second["id"], "live one")
    finally:
        watcher.terminate()
        watcher.wait(20)


def test_mailroom_export_import_round_trip(cli: Cli, tmp_path: Path) -> None:
    add_agent(cli, "alice")
    add_agent(cli, "bob")
    open_mail = cli.json("mail", "send", "alice", "--kind", "task", "--subject", "open one")
    done = cli.json("mail", "send", "bob", "--kind", "report", "--body", "é ✓\r\nline\n")
    bob = cli.json("token", "issue", "bob")["token"]
    cli.json("mail", "close", done["id"], "--label", "W7", token=bob)

    first = tmp_path / "export-1"
    assert "exported" in cli.ok("mailroom", "export", str(first)).stdout
    files = sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file())
    assert any(f.startswith("inbox/alice/") for f in files), files
    assert any(f.startswith("archive/W7/") for f in files), files
    cli.fails("mailroom", "export", str(first), code="directory_not_empty")
    cli.ok("mailroom", "export", str(first), "--force")

    # A second hub on its own data root (SQLite, so on the postgres run the files also cross
    # backends) gets the same mail from the files.
    with served_hub(tmp_path / "home-2") as two:
        other = Cli(two.home)
        add_agent(other, "alice")
        add_agent(other, "bob")
        result = other.json("mailroom", "import", str(first))
        assert (result["imported"], result["skipped"]) == (2, 0)
        again = other.json("mailroom", "import", str(first))
        assert (again["imported"], again["skipped"]) == (0, 2)
        second = tmp_path / "export-2"
        other.ok("mailroom", "export", str(second))
        assert other.json("mail", "show", open_mail["id"])["subject"] == "open one"
    for rel in files:
        assert (second / rel).read_bytes() == (first / rel).read_bytes(), rel
    assert sorted(p.relative_to(second).as_posix() for p in second.rglob("*") if p.is_file()) == (
        files
    )


def test_events_lists_what_happened(cli: Cli) -> None:
    add_agent(cli, "alice")
    events = cli.json("events", "--type", "agent.created")
    assert [e["subject"] for e in events] == ["alice"]
    prefix = cli.json("events", "--type", "agent.", "--limit", "5")
    assert {e["type"] for e in prefix} == {"agent.created"}
    everything = cli.json("events")
    assert everything[-1]["type"] == "principal.created"
    after = cli.json("events", "--after", everything[-1]["id"])
    assert everything[-1]["id"] not in {e["id"] for e in after}
    alice = cli.json("token", "issue", "alice")["token"]
    cli.fails("events", token=alice, code="operator_only")


def test_mail_inbox_follows_pages_and_says_when_more_follow(
    tmp_path: Path, backend: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A one-byte page budget: the hub hands the inbox out one message per page.
    monkeypatch.setenv("PARLEY_PAGE_MAX_BYTES", "1")
    home = tmp_path / "home"
    with served_hub(home, database_url=database_url if backend == "postgres" else None):
        cli = Cli(home)
        alice = add_agent(cli, "alice")
        sent = [cli.json("mail", "send", "alice", "--subject", f"m{i}")["id"] for i in range(3)]
        assert [m["id"] for m in cli.json("mail", "inbox", token=alice)] == sent

        first = cli.ok("mail", "inbox", "--limit", "2", "--json", token=alice)
        shown = json.loads(first.stdout)
        assert [m["id"] for m in shown] == sent[:2]
        after = shown[-1]["seq"]
        assert f"more mail follows; list it with --after-seq {after}" in first.stderr
        rest = cli.ok("mail", "inbox", "--after-seq", str(after), "--json", token=alice)
        assert [m["id"] for m in json.loads(rest.stdout)] == sent[2:]
        assert "more mail follows" not in rest.stderr


def test_mail_send_says_when_an_idempotent_resend_sent_nothing(cli: Cli) -> None:
    add_agent(cli, "alice")
    first = cli.json("mail", "send", "alice", "--idempotency-key", "k")
    assert "replayed" not in first
    again = cli.json("mail", "send", "alice", "--idempotency-key", "k")
    assert again["id"] == first["id"] and again["replayed"] is True
    readable = cli.ok("mail", "send", "alice", "--idempotency-key", "k").stdout
    assert "already sent" in readable and first["id"] in readable
