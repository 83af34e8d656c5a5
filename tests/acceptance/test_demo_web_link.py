"""``parley demo`` ends by printing the web UI's address and a sign-in link for the operator
that works once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

PARLEY = str(Path(sys.executable).with_name("parley"))
LINK = re.compile(r"(http://127\.0\.0\.1:\d+/ui/signin/link\?key=[A-Za-z0-9_-]+)")


def test_the_demo_prints_a_one_time_sign_in_link(tmp_path: Path) -> None:
    env = {**os.environ, "PARLEY_HOME": str(tmp_path / "home"), "COLUMNS": "80"}
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
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
