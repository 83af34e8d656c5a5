"""``parley demo`` ends by printing the web UI's address and a sign-in link for the operator
that works once, and commands that work pasted as they are; its hub listens on PARLEY_PORT."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

PARLEY = str(Path(sys.executable).with_name("parley"))
LINK = re.compile(r"(http://127\.0\.0\.1:\d+/ui/signin/link\?key=[A-Za-z0-9_-]+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_demo_prints_a_one_time_sign_in_link(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PARLEY_HOME": str(tmp_path / "home"),
        "COLUMNS": "80",
        "PARLEY_PORT": str(port),
    }
    env.pop("PARLEY_OPENAI_BASE_URL", None)
    proc = subprocess.Popen(
        [PARLEY, "demo"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        seen = []
        link = None
        for line in proc.stdout:  # ends at EOF if the demo dies: the failure guard
            seen.append(line)
            found = LINK.search(line)
            if found:
                link = found.group(1)
                break
        assert link is not None, "".join(seen)[-3000:]
        assert link.startswith(f"http://127.0.0.1:{port}/"), link
        assert any(re.search(r"Web UI: http://127\.0\.0\.1:\d+/ui/", s) for s in seen)
        token = (tmp_path / "home" / "demo" / "operator.token").read_text().strip()
        assert token not in link
        with httpx.Client() as client:
            first = client.get(link)
            assert first.status_code == 303 and first.headers["location"] == "/ui/"
            assert "parley_session=" in first.headers["set-cookie"]
            page = client.get(link.split("/ui/")[0] + "/ui/")  # with the session cookie
            assert page.status_code == 200 and "Overview" in page.text
        with httpx.Client() as again:
            second = again.get(link)
        assert second.status_code == 401
        assert "used already or has expired" in second.text
        # The commands it suggests work as printed, from another directory, without the
        # environment that pointed the demo at its data root.
        hints = []
        for line in proc.stdout:
            if line.startswith("Press Ctrl+C"):
                break
            if line.startswith("  /"):
                hints.append(shlex.split(line))
        assert hints and all(Path(h[0]).is_absolute() for h in hints), hints
        plain_env = {k: v for k, v in env.items() if not k.startswith("PARLEY_")}
        for hint in hints:
            done = subprocess.run(
                hint, env=plain_env, cwd="/", capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, (hint, done.stderr)
        listed = subprocess.run(
            [*hints[0], "--json"], env=plain_env, capture_output=True, text=True, timeout=60
        )
        assert {"planner", "reviewer", "tester"} <= {a["id"] for a in json.loads(listed.stdout)}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
