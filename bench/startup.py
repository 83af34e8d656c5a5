"""Start-up time of the hub and of the CLI (SPEC Q7).

Every figure is the median wall time over N runs of a fresh process, so it includes the
interpreter's own start-up and every import, as a user or a coding agent calling the CLI sees it:

* ``serve_ready_s``: spawning ``parley serve`` on a fresh data root until ``/readyz`` first
  answers 200 (the data root created, migrations run, the operator created, the port open);
  ``serve_ready_existing_s`` the same on a data root a previous run left.
* ``cli_help_s``: ``parley --help``.
* ``cli_inbox_s``: ``parley mail inbox`` against a running hub (the operator's inbox, 20
  messages: two requests and a table).
* ``import_cli_s`` / ``import_app_s``: ``python -c "import …"`` of the CLI and of the web app.

``/readyz`` is polled every 10 ms, so the ready figures are late by at most that. Progress goes to
stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx

from hub_server import free_port, machine_description, progress, set_quiet

POLL_S = 0.01
READY_TIMEOUT_S = 30.0
INBOX_MESSAGES = 20


def parley_command() -> list[str]:
    """The installed ``parley`` script next to this interpreter (what a user runs)."""
    script = Path(sys.executable).with_name("parley")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from parley.surfaces.cli.app import main; main()"]


def quiet_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env["PARLEY_HOME"] = str(home)
    return env


def timed_run(cmd: Sequence[str], env: dict[str, str]) -> float:
    """Wall seconds of one process from spawn to exit; a failure stops the bench."""
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()}")
    return elapsed


@contextlib.contextmanager
def serving(home: Path) -> Iterator[tuple[str, float]]:
    """Spawn ``parley serve`` on ``home``; yield its URL and the seconds until /readyz was 200."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [*parley_command(), "serve", "--home", str(home), "--port", str(port)]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=quiet_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        with httpx.Client(base_url=url, timeout=2.0) as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/readyz").status_code == 200:
                        break
                if proc.poll() is not None:
                    raise RuntimeError(f"parley serve exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
                if time.perf_counter() - start > READY_TIMEOUT_S:
                    raise RuntimeError("parley serve did not become ready")
                time.sleep(POLL_S)
        ready = time.perf_counter() - start
        yield url, ready
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def median(samples: list[float]) -> float:
    return round(statistics.median(samples), 3)


def measure(name: str, runs: int, one: Callable[[], float]) -> list[float]:
    samples = [one() for _ in range(runs)]
    progress(
        f"{name}: median {statistics.median(samples):.3f} s of {[round(s, 3) for s in samples]}"
    )
    return samples


def fill_inbox(url: str, home: Path) -> None:
    token = (home / "operator.token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10.0) as client:
        for i in range(INBOX_MESSAGES):
            sent = client.post(
                "/v1/mail",
                json={"to": "operator", "kind": "notice", "subject": f"note {i}", "body": "hi"},
            )
            sent.raise_for_status()


def run(runs: int) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="parley-startup-"))
    try:
        fresh_homes = iter(root / f"fresh-{i}" for i in range(runs + 1))

        def fresh_ready() -> float:
            with serving(next(fresh_homes)) as (_, ready):
                return ready

        existing = root / "existing"
        with serving(existing):
            pass

        def existing_ready() -> float:
            with serving(existing) as (_, ready):
                return ready

        env = quiet_env(root / "cli-home")
        python = [sys.executable, "-P", "-c"]
        figures: dict[str, object] = {
            "import_cli_s": median(
                measure(
                    "import cli",
                    runs,
                    lambda: timed_run([*python, "import parley.surfaces.cli.app"], env),
                )
            ),
            "import_app_s": median(
                measure(
                    "import app",
                    runs,
                    lambda: timed_run([*python, "import parley.surfaces.rest.app"], env),
                )
            ),
            "cli_help_s": median(
                measure(
                    "parley --help", runs, lambda: timed_run([*parley_command(), "--help"], env)
                )
            ),
            "serve_ready_s": median(measure("serve ready (fresh)", runs, fresh_ready)),
            "serve_ready_existing_s": median(
                measure("serve ready (existing)", runs, existing_ready)
            ),
        }
        with serving(existing) as (url, _):
            fill_inbox(url, existing)
            inbox_env = quiet_env(existing)
            inbox = [*parley_command(), "mail", "inbox"]
            timed_run(inbox, inbox_env)  # a warm-up: the first request of the hub itself
            figures["cli_inbox_s"] = median(
                measure("parley mail inbox", runs, lambda: timed_run(inbox, inbox_env))
            )
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs of each (under a minute)")
    parser.add_argument("--runs", type=int, default=None, help="runs of each figure (default 9)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    set_quiet(args.quiet)
    runs = args.runs or (3 if args.quick else 9)
    before = machine_description()
    figures = run(runs)
    result = {
        "runs": runs,
        **figures,
        "machine": before,
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
