"""A fake command-line agent for the ``command`` runtime (text protocol).

Usage: ``agent_command.py MODE``; the prompt arrives on stdin.

- ``echo``: print the prompt back.
- ``silent``: print nothing, exit 0.
- ``fail``: write an error to stderr, exit 3.
- ``hang``: start a grandchild, report both pids to the test on 127.0.0.1:$FAKE_READY_PORT,
  then wait forever. With ``--ignore-term`` both ignore SIGTERM, so only SIGKILL stops them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys


def report(line: str) -> None:
    with socket.create_connection(("127.0.0.1", int(os.environ["FAKE_READY_PORT"]))) as conn:
        conn.sendall(line.encode() + b"\n")


def main() -> int:
    mode = sys.argv[1]
    prompt = sys.stdin.read()
    if mode == "echo":
        sys.stdout.write(prompt)
        return 0
    if mode == "silent":
        return 0
    if mode == "fail":
        sys.stderr.write("fatal: the model is on fire\n")
        return 3
    if mode == "hang":
        ignore = "--ignore-term" in sys.argv
        if ignore:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild
        grandchild = subprocess.Popen(
            [sys.executable, "-c", "import signal\nwhile True: signal.pause()"],
            stdin=subprocess.DEVNULL,
        )
        report(f"{os.getpid()} {grandchild.pid}")
        while True:
            signal.pause()
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
