"""The quick start's main job: ``parley demo`` runs end to end on a fresh data root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PARLEY = str(Path(sys.executable).with_name("parley"))


def test_demo_shows_mail_and_a_discussion_that_reports_back(tmp_path: Path) -> None:
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
