"""Run a hub under uvicorn in its own process for the bench scripts, and the helpers they share.

Run as a script it serves ``create_app(settings)`` (or, with ``--bare``, a one-route reference
app) with one worker, no access log, and uvloop and httptools when they are installed (or, with
``--serving hub``, what ``parley serve`` uses), and writes ``<home>/operator.token`` once the
hub has started so that a client process can act as the operator. Imported, it offers
``HubProcess`` (start that script, wait until it answers, stop it), ``temp_postgres`` (a
throwaway database) and small reporting helpers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

PG_ADMIN_URL = os.environ.get("PARLEY_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0

_QUIET = False


# -- reporting --------------------------------------------------------------------------------
def set_quiet(quiet: bool) -> None:
    global _QUIET
    _QUIET = quiet


def progress(message: str) -> None:
    """Human-readable progress goes to stderr so that stdout stays machine-readable."""
    if not _QUIET:
        print(f"[bench] {message}", file=sys.stderr, flush=True)


def percentile(sorted_values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile of an already sorted sequence (None when it is empty)."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * pct // 100))
    return float(sorted_values[min(len(sorted_values), int(rank)) - 1])


def install_signal_exit() -> None:
    """Turn SIGTERM into SystemExit so that ``finally`` blocks clean up on every path."""

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def pin_to(cpus: set[int]) -> bool:
    """Restrict the calling thread (and the threads it starts later) to ``cpus``; False where
    the platform cannot."""
    setter = getattr(os, "sched_setaffinity", None)
    if setter is None:
        return False
    setter(0, cpus)
    return True


def split_cpus() -> tuple[set[int], set[int]] | None:
    """One CPU for the server, the others for load generators (None on a single CPU or where
    affinity cannot be set), so that the load never competes with the server for its core."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return None
    cpus = sorted(getter(0))
    if len(cpus) < 2:
        return None
    return {cpus[0]}, set(cpus[1:])


def machine_description() -> dict[str, Any]:
    """What the figures were measured on, including how busy the machine was (load average)."""
    return {
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
        "platform": sys.platform,
    }


# -- a throwaway PostgreSQL database -----------------------------------------------------------
@contextlib.asynccontextmanager
async def temp_postgres(prefix: str = "parley_bench_") -> AsyncIterator[str]:
    """Create a fresh database on the server of ``PG_ADMIN_URL``; drop it on the way out."""
    import asyncpg

    from parley.core.ids import new_ulid

    name = f"{prefix}{new_ulid().lower()}"
    admin = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    progress(f"created database {name}")
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        admin = await asyncpg.connect(PG_ADMIN_URL)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
        progress(f"dropped database {name}")


# -- the server process, seen from the bench ---------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HubProcess:
    """A hub served by uvicorn in a child process; ``stop`` is safe to call on every path."""

    def __init__(
        self,
        home: Path,
        database_url: str | None,
        port: int | None = None,
        *,
        cpus: set[int] | None = None,
        bare: bool = False,
        serving: str = "bench",
    ) -> None:
        self.home = home
        self.database_url = database_url
        self.cpus = cpus
        self.bare = bare
        self.serving = serving
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.operator_token = ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> None:
        cmd = [sys.executable, str(Path(__file__)), "--home", str(self.home)]
        cmd += ["--port", str(self.port)]
        if self.database_url:
            cmd += ["--database-url", self.database_url]
        if self.cpus:
            cmd += ["--cpus", ",".join(str(c) for c in sorted(self.cpus))]
        if self.bare:
            cmd.append("--bare")
        cmd += ["--serving", self.serving]
        self.home.mkdir(parents=True, exist_ok=True)
        log = (self.home / "server.log").open("wb")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        token_file = self.home / "operator.token"
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the hub exited at start:\n{self.log_tail()}")
                if self.bare or token_file.exists():
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/readyz")).status_code == 200:
                            break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the hub did not become ready:\n{self.log_tail()}")
                await asyncio.sleep(0.05)
        if not self.bare:
            self.operator_token = token_file.read_text().strip()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = (self.home / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def children(procs: list[subprocess.Popen[bytes]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Kill whatever child processes are still running when the block is left."""
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.wait(STOP_TIMEOUT_S)


# -- the server process itself -----------------------------------------------------------------
def _build_app(home: Path, database_url: str | None) -> Any:
    from parley.config import Settings, operator_token_path
    from parley.core.identity import OPERATOR_ID
    from parley.service.hub import Hub
    from parley.surfaces.rest.app import create_app

    # A load test measures throughput: the per-sender quotas would refuse it by design.
    settings = Settings(
        home=home, database_url=database_url, send_rate_per_minute=0, send_bytes_per_minute=0
    )
    app = create_app(settings)
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(the_app: Any) -> AsyncIterator[Any]:
        async with inner(the_app) as state:
            hub: Hub = the_app.state.hub
            token = hub.operator_token
            if token is None:
                # The database already had an operator (a reused --database-url): mint a token.
                operator = await hub.identity.require(OPERATOR_ID)
                token = await hub.identity.issue_token(operator, OPERATOR_ID, rotate=False)
            path = operator_token_path(home)
            path.write_text(token + "\n")
            path.chmod(0o600)
            yield state

    app.router.lifespan_context = lifespan
    return app


def _bare_app() -> Any:
    """The reference for the REST stack: a Starlette route that reads a JSON body and answers
    a fixed small JSON body, at the path and status the mail load generator expects."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def send(request: Request) -> JSONResponse:
        await request.json()
        return JSONResponse({"id": "01J00000000000000000000000", "seq": 1}, status_code=201)

    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/mail", send, methods=["POST"]),
            Route("/healthz", healthz),
            Route("/readyz", healthz),
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a parley hub for a bench script.")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default=os.environ.get("PARLEY_BENCH_LOOP", "auto"),
        help="event loop (auto: uvloop when installed)",
    )
    parser.add_argument("--cpus", default=None, help="pin the server to these CPUs, e.g. 0 or 0,1")
    parser.add_argument(
        "--bare", action="store_true", help="serve the reference app instead of a hub"
    )
    parser.add_argument(
        "--serving",
        choices=["bench", "hub"],
        default="bench",
        help="bench: uvloop and httptools when installed; hub: what `parley serve` uses",
    )
    args = parser.parse_args(argv)
    if args.cpus:
        # Before uvicorn starts: threads made later (SQLite readers) inherit the affinity.
        pin_to({int(c) for c in args.cpus.split(",")})

    import uvicorn

    has = importlib.util.find_spec
    loop = args.loop if args.loop != "auto" else ("uvloop" if has("uvloop") else "asyncio")
    if args.serving == "hub":
        from parley.config import Settings
        from parley.surfaces.cli.hubserver import serving_options

        options = serving_options(Settings(home=args.home))
    else:
        options = {
            "http": "httptools" if has("httptools") else "h11",
            "timeout_graceful_shutdown": 5,
        }
    app = _bare_app() if args.bare else _build_app(args.home, args.database_url)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=1,
        access_log=False,
        log_level="warning",
        loop=loop,
        **options,
    )


if __name__ == "__main__":
    main()
