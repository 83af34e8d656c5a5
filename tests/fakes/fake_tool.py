"""A tool process started the way Claude Code runs its Bash tool: in a session of its own
(``setsid``), so stopping the CLI's process group does not reach it.

With ``$FAKE_TOOL_PIDS`` the fake CLIs start one such tool at the start of each turn (before
anything else of the turn, a crash included) and append ``<cli pid> <tool pid>`` to that file,
so a test knows by pid every process a worker's turn started.
"""

from __future__ import annotations

import os
import subprocess


def start_tool() -> None:
    path = os.environ.get("FAKE_TOOL_PIDS")
    if not path:
        return
    tool = subprocess.Popen(
        ["sleep", "600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {tool.pid}\n")
