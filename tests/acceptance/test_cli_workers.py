"""Workers through the real ``parley`` CLI against a real ``parley serve`` process: a root
worker started, children and grandchildren spawned, a subtree cancelled around an independent
child, a running turn taken over, the parent woken by the task-result, the tree and a session's
topology, the live watch, and refusals that print the hub's error code and exit 1.

Children's first turns run the scripted ``hang`` step: they stay in flight until a cancel or a
takeover stops them, so every step happens while the turn it needs is running, without sleeps.
The test waits on the live ``worker watch --json`` stream for the states it needs.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

from tests.acceptance.cli_support import Cli, LineReader, ServedHub
from tests.acceptance.test_cli_channels import scripted, watcher

WAIT_S = 60
HANG = {"hang": True}


class States:
    """The (worker, state) changes a ``worker watch --json`` process has printed, in order."""

    def __init__(self, lines: LineReader) -> None:
        self.lines = lines
        self.seen: list[tuple[str, str]] = []
        self.now: dict[str, str] = {}

    def _take(self, line: str) -> None:
        event = json.loads(line)
        data = event["data"]
        changed = data["workers"] if event["event"] == "tree" else [data]
        for w in changed:
            self.seen.append((w["id"], w["state"]))
            self.now[w["id"]] = w["state"]

    def wait(self, done: Callable[[States], bool], what: str) -> None:
        """Read the watch's lines until ``done`` holds (bounded by the reader's deadline)."""
        while not done(self):

            def step(line: str) -> bool:
                self._take(line)
                return done(self)

            try:
                self.lines.wait_for(step, WAIT_S)
            except AssertionError as exc:
                raise AssertionError(f"{what}: {exc}") from None

    def after(self, first: tuple[str, str], then: tuple[str, str]) -> bool:
        """Whether ``then`` was seen after ``first``."""
        if first not in self.seen:
            return False
        return then in self.seen[self.seen.index(first) + 1 :]


def finish(proc: subprocess.Popen[str], lines: LineReader) -> str:
    """Wait for a watcher to exit by itself (status 0) and return all it printed."""
    try:
        code = proc.wait(WAIT_S)
        out = lines.until_end(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, (proc.stderr.read() if proc.stderr else "") + lines.text()
    return out


def test_a_worker_tree_spawned_cancelled_taken_over_and_watched(cli: Cli, hub: ServedHub) -> None:
    scripted(cli, "lead", ["Plan: helper fixes the test, prober probes.", "lead read the result"])
    scripted(cli, "helper", [HANG, "Fixed the flaky test after the takeover."], timeout_s=300)
    prober = scripted(cli, "prober", [HANG, HANG], timeout_s=300)
    scripted(cli, "scout", [HANG], timeout_s=300)

    root = cli.json("worker", "start", "Audit the parser", "--agent", "lead", "--name", "audit")
    assert (root["agent_id"], root["purpose"], root["parent_worker_id"]) == ("lead", "root", None)
    rid = root["id"]
    proc, lines = watcher(hub, "worker", "watch", rid, "--json")
    human, human_lines = watcher(hub, "worker", "watch", rid)
    states = States(lines)
    try:
        states.wait(lambda s: s.now.get(rid) == "idle", "the root's first turn ends")

        fix = cli.json(
            "worker", "spawn", rid, "Fix the flaky parser test", "--agent", "helper",
            "--block-parent",
        )  # fmt: skip
        assert (fix["parent_worker_id"], fix["trace_id"]) == (rid, root["trace_id"])
        assert fix["block_parent"] is True
        probe = cli.json(
            "worker", "spawn", rid, "Probe the tokenizer", "--agent", "prober",
            "--purpose", "research", "--no-inherit-context",
        )  # fmt: skip
        unicode = cli.json("worker", "spawn", probe["id"], "Probe unicode input")
        assert unicode["agent_id"] == "prober"  # the parent's agent by default
        log = cli.json(
            "worker", "spawn", probe["id"], "Keep a log of the probes", "--agent", "scout",
            "--independent",
        )  # fmt: skip
        children = [fix["id"], probe["id"], unicode["id"], log["id"]]
        states.wait(lambda s: all(s.now.get(c) == "running" for c in children), "the children run")

        # Cancel the probe: its child goes with it, the independent one keeps running.
        cancelled = cli.json("worker", "cancel", probe["id"], "--reason", "wrong approach")
        stopped = [
            (w["id"], w["state"], w["cancel_propagated_from"]) for w in cancelled["cancelled"]
        ]
        assert stopped == [(probe["id"], "killed", None), (unicode["id"], "killed", probe["id"])]
        tree = cli.ok("worker", "tree", rid).stdout
        assert f"{probe['id']}  killed  prober" in tree
        assert f"{unicode['id']}  killed  prober  cancelled through {probe['id']}" in tree
        assert f"{log['id']}  running  scout  independent" in tree
        assert f"{rid}  idle  lead  ◀" in tree
        killed = cli.json("worker", "list", "--state", "killed")
        assert sorted(w["id"] for w in killed) == sorted([probe["id"], unicode["id"]])

        # Take over helper's running turn: interrupted, then its next turn finishes the child,
        # whose task-result wakes the parent that blocked on it.
        taken = cli.json(
            "worker", "takeover", fix["id"], "Only fix the test; leave the parser alone.",
            "--timeout", "30",
        )  # fmt: skip
        assert (taken["interrupted"], taken["timed_out"]) == (True, False)
        assert taken["worker"]["pending_takeover_message_id"] == taken["message_id"]
        states.wait(
            lambda s: (
                s.after((fix["id"], "completed"), (rid, "running"))
                and s.after((rid, "running"), (rid, "idle"))
            ),
            "the child completes and the parent wakes",
        )
    except BaseException:
        for p in (proc, human):
            p.kill()
            p.wait()
        raise

    assert states.after((fix["id"], "interrupted"), (fix["id"], "running"))
    done = cli.json("worker", "show", fix["id"])
    assert (done["state"], done["pending_takeover_message_id"]) == ("completed", None)
    assert done["result"]["summary"] == "Fixed the flaky test after the takeover."
    # Newest first: read them back in the order they happened.
    events = [e["type"] for e in reversed(cli.json("events", "--subject", f"worker:{fix['id']}"))]
    assert events.index("system.takeover_initiated") < events.index("worker.interrupted")
    assert events.index("worker.interrupted") < events.index("system.takeover_consumed")
    envelope = [
        m["content"]
        for m in cli.json("channel", "messages", fix["channel_id"])
        if "[TAKEOVER]" in m["content"]
    ]
    assert len(envelope) == 1
    assert "This is a takeover of an interrupted turn, not a new task" in envelope[0]
    assert "Only fix the test; leave the parser alone." in envelope[0]
    woke = cli.json("channel", "messages", root["channel_id"])
    assert [m["content"] for m in woke if m["sender_kind"] == "agent"][-1] == (
        "lead read the result"
    )
    # The parent's wake-up reads the result once, after its session's other pending mail.
    result = "[TASK RESULT] audit / fix-the-flaky-parser-test succeeded."
    [wake] = [m["content"] for m in woke if result in m["content"]]
    assert wake.count(result) == 1
    assert wake.index("[TASK RESULT] audit / probe-the-tokenizer failed.") < wake.index(result)

    shown = cli.ok("worker", "show", fix["id"]).stdout
    assert f"{fix['id']}  completed  helper" in shown
    assert "Fixed the flaky test after the takeover." in shown
    topology = cli.json("worker", "topology", root["session_id"])
    assert [s["display_name"] for s in topology["child_sessions"]] == [
        "audit / fix-the-flaky-parser-test",
        "audit / probe-the-tokenizer",
        "audit / probe-the-tokenizer / probe",
        "audit / probe-the-tokenizer / keep-a-log",
    ]
    readable = cli.ok("worker", "topology", root["session_id"]).stdout
    assert f"{fix['id']}  completed  helper  audit / fix-the-flaky-parser-test" in readable
    assert "task-result" in readable and "takeover" in readable

    # Refusals print the hub's code and exit 1.
    cli.fails("worker", "show", "w-nobody", code="worker_not_found")
    # A worker the caller may not see is missing to an action as to a read.
    cli.fails("worker", "cancel", fix["id"], token=prober, code="worker_not_found")
    cli.fails("worker", "show", fix["id"], token=prober, code="worker_not_found")
    cli.fails("worker", "cancel", probe["id"], code="worker_finished")
    cli.fails("worker", "takeover", fix["id"], "  ", code="empty_instruction")
    cli.fails("worker", "takeover", fix["id"], "go", "--timeout", "500", code="invalid_timeout")
    cli.fails("worker", "takeover", fix["id"], "go", code="worker_not_takeable")
    cli.fails("worker", "resume", probe["id"], code="worker_not_resumable")
    cli.fails("worker", "release", fix["id"], code="illegal_worker_transition")
    cli.fails("worker", "start", "no agent named", code="agent_required")

    # Releasing the root ends both watches.
    released = cli.json("worker", "release", rid)
    assert released["state"] == "released"
    finish(proc, lines)
    out = finish(human, human_lines)
    assert f"{fix['id']} (helper) running → interrupted" in out
    assert f"{fix['id']} (helper) running → completed (result reported)" in out
    assert f"{unicode['id']} (prober) running → killed (wrong approach)" in out
    assert f"{rid} ended: released" in out
    # Watching a worker that has ended shows its tree once and returns.
    again = cli.ok("worker", "watch", rid).stdout
    assert f"{rid}  released  lead  ◀" in again
    assert f"{log['id']}  running  scout  independent" in again
    assert f"{rid} ended: released" in again


def test_spawning_from_a_finished_worker_and_unknown_states_are_refused(cli: Cli) -> None:
    scripted(cli, "lead", ["ok"])
    root = cli.json("worker", "start", "Plan the release", "--agent", "lead")
    cancelled = cli.json("worker", "cancel", root["id"], "--no-propagate", "--force")
    assert [w["id"] for w in cancelled["cancelled"]] == [root["id"]]
    cli.fails("worker", "spawn", root["id"], "too late", code="worker_finished")
    cli.fails("worker", "list", "--state", "asleep", code="validation_error")
    listed: list[dict[str, Any]] = cli.json("worker", "list", "--state", "killed")
    assert [w["id"] for w in listed] == [root["id"]]
