"""Helpers for the CLI acceptance tests: the real ``parley`` console script as subprocesses, a
real ``parley serve`` hub, and bounded waits on their output (never sleeps)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
# Variables that would point a subprocess at another hub, data root or database.
ISOLATED_VARS = (
    "PARLEY_HOME",
    "PARLEY_URL",
    "PARLEY_TOKEN",
    "PARLEY_DATABASE_URL",
    "PARLEY_HOST",
    "PARLEY_PORT",
)
READY_LINE = re.compile(r"parley hub running at (\S+)")
LAST_LINE = "Press Ctrl+C to stop."


def parley_executable() -> str:
    beside = Path(sys.executable).with_name("parley")
    if beside.exists():
        return str(beside)
    found = shutil.which("parley")
    if found is None:
        raise RuntimeError("the `parley` console script is not installed; run pip install -e .")
    return found


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ISOLATED_VARS}
    env["COLUMNS"] = "200"  # readable tables do not fold ids at a pipe's default 80 columns
    env.update(extra)
    return env


class LineReader:
    """Collects a stream's lines on a thread so a test can wait for one with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float) -> str:
        """The first new line that satisfies ``predicate``; fails at EOF or after ``timeout``."""
        deadline = _Deadline(timeout)
        while True:
            try:
                line = self._queue.get(timeout=deadline.remaining())
            except queue.Empty:
                raise AssertionError(
                    f"no matching line within {timeout}s; saw:\n" + "\n".join(self.lines)
                ) from None
            if line is None:
                self._queue.put(None)  # keep the end visible to later waits
                raise AssertionError("the stream ended; saw:\n" + "\n".join(self.lines))
            self.lines.append(line)
            if predicate(line):
                return line

    def until_end(self, timeout: float) -> str:
        """Everything up to the end of the stream (the process exited)."""
        deadline = _Deadline(timeout)
        while True:
            try:
                line = self._queue.get(timeout=deadline.remaining())
            except queue.Empty:
                raise AssertionError(f"the stream did not end within {timeout}s") from None
            if line is None:
                self._queue.put(None)  # keep the end visible to later waits
                return self.text()
            self.lines.append(line)

    def text(self) -> str:
        return "\n".join(self.lines)


class _Deadline:
    def __init__(self, seconds: float) -> None:
        import time

        self._time = time.monotonic
        self._end = self._time() + seconds

    def remaining(self) -> float:
        left = self._end - self._time()
        if left <= 0:
            raise queue.Empty
        return left


@dataclass
class ServedHub:
    """A ``parley serve`` subprocess and where it lives."""

    home: Path
    proc: subprocess.Popen[str]
    output: LineReader
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def token(self) -> str:
        return (self.home / "operator.token").read_text().strip()

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not stop in time; always reaped."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def spawn_hub(
    home: Path,
    *,
    database_url: str | None = None,
    cwd: Path | None = None,
    home_by_env: bool = False,
    extra_args: Sequence[str] = (),
) -> ServedHub:
    """Start ``parley serve`` on a free port (``--port 0``) without waiting for it."""
    env = child_env()
    if database_url is not None:
        env["PARLEY_DATABASE_URL"] = database_url
    cmd = [parley_executable(), "serve", "--port", "0", *extra_args]
    if home_by_env:
        env["PARLEY_HOME"] = str(home)
    else:
        cmd += ["--home", str(home)]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    return ServedHub(home=home, proc=proc, output=LineReader(proc.stdout), env=env)


def wait_ready(hub: ServedHub) -> ServedHub:
    """Wait for the hub's whole announcement, then check that /healthz answers."""
    hub.output.wait_for(lambda text: text.startswith(LAST_LINE), START_TIMEOUT_S)
    match = READY_LINE.search(hub.output.text())
    assert match is not None, hub.output.text()
    hub.url = match.group(1)
    response = httpx.get(f"{hub.url}/healthz", timeout=10)
    assert response.status_code == 200, response.text
    return hub


@contextlib.contextmanager
def served_hub(
    home: Path, *, database_url: str | None = None, cwd: Path | None = None, home_by_env=False
) -> Iterator[ServedHub]:
    hub = spawn_hub(home, database_url=database_url, cwd=cwd, home_by_env=home_by_env)
    try:
        yield wait_ready(hub)
    finally:
        hub.stop()


@dataclass
class Cli:
    """Runs the real ``parley`` console script against one hub."""

    home: Path
    cwd: Path | None = None

    def run(
        self,
        *args: str,
        token: str | None = None,
        input: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        home: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [parley_executable()]
        if home:
            cmd += ["--home", str(self.home)]
        if token is not None:
            cmd += ["--token", token]
        return subprocess.run(
            [*cmd, *args],
            cwd=cwd or self.cwd,
            env=child_env(**(env or {})),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )

    def ok(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        result = self.run(*args, **kw)
        assert result.returncode == 0, (
            f"{args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
        return result

    def json(self, *args: str, **kw: Any) -> Any:
        return json.loads(self.ok(*args, "--json", **kw).stdout)

    def fails(self, *args: str, code: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        """Run a command that must be refused with ``error [code]`` and exit status 1."""
        result = self.run(*args, **kw)
        assert result.returncode == 1, (
            f"{args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
        assert f"error [{code}]: " in result.stderr, result.stderr
        return result
