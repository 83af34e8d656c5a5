"""README.md's "Running a hub" works as written: its commands, run in order by a shell on a
fresh data root the way a user types them, against the hub its first block starts."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.acceptance.cli_support import (
    LineReader,
    ServedHub,
    child_env,
    parley_executable,
    wait_ready,
)

README = Path(__file__).resolve().parents[2] / "README.md"


def section_blocks(title: str) -> list[str]:
    """The bash blocks of one ``## title`` section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)


def test_the_readme_commands_run_in_order_on_a_fresh_data_root(tmp_path: Path) -> None:
    serve_block, commands = section_blocks("Running a hub")[:2]
    serve = serve_block.split("#", 1)[0].split()
    assert serve == ["parley", "serve"]
    bin_dir = str(Path(parley_executable()).parent)
    # The user's environment: parley on PATH, a data root of their own and a free port.
    env = child_env(PARLEY_HOME=str(tmp_path / "home"), PARLEY_PORT="0")
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    proc = subprocess.Popen(
        serve,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    hub = wait_ready(ServedHub(tmp_path / "home", proc, LineReader(proc.stdout)))
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", commands],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out = done.stdout
        assert "token for alice" in out and "token for bob" in out
        assert "Review the parser" in out  # alice's inbox, read with her own token
        assert "Agreed." in out and "finished: max_rounds" in out  # the watched discussion
        assert "ready" in out  # parley status
    finally:
        hub.stop()
