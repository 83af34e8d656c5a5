"""The quick start's main job: ``parley demo`` runs end to end on a fresh data root."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

PARLEY = str(Path(sys.executable).with_name("parley"))


def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(query).fetchall()


def test_demo_shows_mail_a_discussion_a_meeting_and_a_worker_tree(tmp_path: Path) -> None:
    env = {**os.environ, "PARLEY_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env.pop("PARLEY_OPENAI_BASE_URL", None)
    done = subprocess.run(
        [PARLEY, "demo", "--exit-after"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:] + out[-3000:]
    assert "scripted runtime" in out
    assert "same id: True" in out
    assert "403 inbox_forbidden" in out
    assert "[Discussion Started]" in out
    assert "ended: unanimous" in out
    assert "403 not_initiator" in out
    assert "403 summary_outside_workspace" in out
    assert "callback accepted: status=closed" in out
    assert "[Discussion Result Ready]" in out
    assert "queue-design-summary.md" in out.split("[Discussion Result Ready]", 1)[1]
    assert "[Channel Closed]" in out
    assert "demo complete" in out
    summary = tmp_path / "home" / "demo" / "workspaces" / "planner" / "queue-design-summary.md"
    assert "aging" in summary.read_text().lower()

    # The meeting: tester was working, awaited entry and entered late at its turn's end.
    meeting = out.split("7. A meeting room", 1)[1]
    assert "awaiting entry tester" in meeting
    assert "── tester entered late" in meeting
    db = tmp_path / "home" / "demo" / "parley.db"
    events = [
        (kind, json.loads(payload))
        for kind, payload in rows(db, "SELECT type, payload FROM events ORDER BY id")
    ]
    late = [p for kind, p in events if kind == "meeting.entered"]
    assert [(p["agent_id"], p["late"]) for p in late] == [("tester", True)]
    # Moderator decisions by planner's scripted runtime, labelled as scripted.
    decisions = [p for kind, p in events if kind.startswith("meeting.moderator")]
    assert [p.get("next") or p["action"] for p in decisions] == [
        "planner", "reviewer", "tester", "planner", "adjourn",
    ]  # fmt: skip
    assert all(p["scripted"] and not p["fallback"] for p in decisions)
    assert "invite tester (scripted)" in meeting
    # The human's post is in the transcript, and the next speaker answered it.
    assert "operator (human): Operator here: ship it behind a feature flag" in meeting
    [(spoken,)] = rows(
        db,
        "SELECT m.content FROM speeches s JOIN channel_messages m ON m.id = s.message_id "
        "WHERE s.agent_id = 'tester'",
    )
    assert "To the operator: agreed" in spoken
    # Each member spoke and wrote minutes with its own scripted runtime; all minutes differ.
    voices = rows(db, "SELECT DISTINCT agent_id, runtime, model_route FROM speeches")
    assert sorted(voices) == [
        (agent, "scripted", f"scripted:{agent}-script")
        for agent in ("planner", "reviewer", "tester")
    ]
    minutes = rows(db, "SELECT agent_id, status, text FROM minutes ORDER BY agent_id")
    assert [(agent, status) for agent, status, _ in minutes] == [
        ("planner", "delivered"), ("reviewer", "delivered"), ("tester", "delivered"),
    ]  # fmt: skip
    assert len({text for _, _, text in minutes}) == 3
    assert "all different = True" in meeting
    # Dismissal restored the states the summons found (recorded, and as the demo showed them).
    assert dict(rows(db, "SELECT agent_id, state FROM room_members")) == {
        "planner": "idle-waiting",
        "reviewer": "done",
        "tester": "working",
    }
    assert "restored to the state the summons found: True" in meeting

    # The workers: planner's worker, reviewer's and tester's children, tester's own child.
    scene = out.split("8. Workers", 1)[1].split("9. Everything above", 1)[0]
    workers = rows(
        db,
        "SELECT id, agent_id, state, parent_worker_id, cancel_propagated_from, result FROM workers",
    )
    [root] = [w[0] for w in workers if w[3] is None]
    children = {w[1]: w for w in workers if w[3] == root}
    assert sorted(children) == ["reviewer", "tester"]
    note, rerun = children["reviewer"][0], children["tester"][0]
    [burst] = [w for w in workers if w[3] == rerun]
    assert burst[1] == "tester"
    states = {w[0]: w[2] for w in workers}
    assert [states[root], states[note], states[rerun], states[burst[0]]] == [
        "idle", "completed", "killed", "killed",
    ]  # fmt: skip
    # The cancel of tester's child took its own child with it, recorded and shown.
    assert [children["tester"][4], burst[4]] == [None, rerun]
    assert f"│ {rerun} │ tester │" in scene and "- (cancelled itself)" in scene
    assert f"│ {burst[0]} │ tester │" in scene and f"killed │ {rerun} │" in scene
    # The takeover: both events on reviewer's worker, in order, and the envelope it read.
    takeover = [
        kind
        for kind, subject in rows(db, "SELECT type, subject FROM events ORDER BY id")
        if subject == f"worker:{note}" and kind.startswith("system.takeover")
    ]
    assert takeover == ["system.takeover_initiated", "system.takeover_consumed"]
    assert "interrupted=True, timed out=False" in scene
    assert "system.takeover_initiated" in scene and "system.takeover_consumed" in scene
    assert "This is a takeover of an interrupted turn, not a new task." in scene
    assert "<takeover_instruction>" in scene
    # reviewer's result reached planner, which woke and read it once, after its other mail.
    assert "Idempotency note written" in json.loads(children["reviewer"][5])["summary"]
    woke = scene.split("what its turn read", 1)[1].split("planner (scripted", 1)[0]
    result = "[TASK RESULT] thursday-release / write-the-idempotency succeeded."
    assert woke.count(result) == 1
    assert woke.index("[TASK RESULT] thursday-release / rerun-the-burst-test failed.") < (
        woke.index(result)
    )
    assert "planner (scripted:planner-script): Read reviewer's task-result" in scene
    # The tree, as Rich draws it.
    tree = scene.split("the tree of thursday-release", 1)[1]
    assert f"└── {root}  idle  planner  thursday-release" in tree
    assert f"├── {note}  completed  reviewer  thursday-release / write-the-idempotency" in tree
    assert f"└── {rerun}  killed  tester  thursday-release / rerun-the-burst-test" in tree
    assert f"{burst[0]}  killed  tester" in tree and f"cancelled through {rerun}" in tree
