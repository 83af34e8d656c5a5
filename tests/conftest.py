"""Shared fixtures, and which tests run on which backend.

The store backend is chosen with ``--backend`` or ``PARLEY_TEST_BACKEND`` (sqlite, the default,
or postgres); CI runs the suite once on each (``scripts/test.sh``). The store contract — every
test that reaches a database, except those whose subject is a surface over it (``RUN_ONCE``) —
runs on both; tests of one backend's own behaviour (``postgres_only``, ``sqlite_only``) on that
one; everything else once, on SQLite. What does not run is deselected at collection, never
skipped, and the run ends with its counts ("store contract on <backend>: N tests")."""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.bootstrap import build_hub, default_runtimes
from parley.config import Settings
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.surfaces.rest.app import create_app
from parley.testing import FakeClock, StaticRuntimes
from tests.databases import (
    PG_ADMIN_URL,
    SQLITE_FILE,
    PostgresWorkerDatabase,
    SqliteTemplate,
    create_pg_database,
    drop_pg_database,
    pg_dsn,
    run_apart,
)

ROOT = Path(__file__).resolve().parents[1]
_pg_dsn = pg_dsn
__all__ = ["PG_ADMIN_URL", "AgentHandle", "MakeAgent", "_pg_dsn", "free_port"]

RUN_ONCE = (
    "tests/unit/",
    "tests/web/",
    "tests/integration/test_web_",
    "tests/integration/test_cli_",
    "tests/integration/test_docs_",
    "tests/integration/discord/",
    "tests/acceptance/test_cli_agent_connect.py",
    "tests/acceptance/test_cli_channels.py",
    "tests/acceptance/test_cli_discord.py",
    "tests/acceptance/test_cli_invitations.py",
    "tests/acceptance/test_cli_mail.py",
    "tests/acceptance/test_cli_rooms.py",
    "tests/acceptance/test_cli_workers.py",
    "tests/acceptance/test_demo",
    "tests/acceptance/test_mcp_inspector.py",
    "tests/acceptance/test_mcp_stdio.py",
    "tests/acceptance/test_security_log_tokens.py",
    "tests/acceptance/test_security_request_guard.py",
    "tests/acceptance/test_serve_json_logs.py",
)
"""Tests that reach the store but whose subject is not the store: what the web UI, the CLI, the
docs' examples and the Discord bridge make of what the services give them. They run once, on
SQLite; the services and the store they call are tested on both backends elsewhere."""

SLOW_FIRST = (
    "tests/integration/test_api_fuzz.py",
    "tests/integration/test_security_secrets.py",
    "tests/unit/test_mailroom_exact.py",
    "tests/acceptance/",
    "tests/web/",
)
"""Modules of the longest tests (``--durations``), started first."""

COUNTS = pytest.StashKey[dict[str, int]]()
"""How many tests of each kind (``where_it_runs``) this run selected."""

BACKEND_ONLY = {"sqlite": "sqlite_only", "postgres": "postgres_only"}
"""Marks (or fixtures of the same name) of tests that test one backend's own behaviour."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        default=os.environ.get("PARLEY_TEST_BACKEND", "sqlite"),
        choices=["sqlite", "postgres"],
        help="store backend the suite runs against",
    )


def relative(item: pytest.Item) -> str:
    return Path(str(item.path)).relative_to(ROOT).as_posix()


def where_it_runs(item: pytest.Item) -> str:
    """Where a test runs: "contract" on both backends, "sqlite_only" or "postgres_only" on that
    one, "once" on SQLite only (the same test on either backend), "opt_in" when asked."""
    names = set(getattr(item, "fixturenames", ()))
    marks = {mark.name for mark in item.iter_markers()}
    if "real_clis" in marks:
        return "opt_in"
    for only in BACKEND_ONLY.values():
        if only in marks or only in names:
            return only
    # A test that asks for no backend (and so no database) is the same test on both: it runs
    # once. So is one whose subject is a surface over the store.
    if "backend" not in names or relative(item).startswith(RUN_ONCE):
        return "once"
    return "contract"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (never skip) what does not run on this backend; count what does."""
    backend = config.getoption("--backend")
    opted_in = os.environ.get("PARLEY_REAL_CLIS") == "1"
    runs = {"contract", BACKEND_ONLY[backend]} | ({"once"} if backend == "sqlite" else set())
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    counts: Counter[str] = Counter()
    for item in items:
        kind = where_it_runs(item)
        if kind in runs or (kind == "opt_in" and opted_in):
            kept.append(item)
            counts[kind] += 1
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # The longest first, so that parallel processes do not end waiting on one of them; each
    # module stays in one piece, in its own order.
    items[:] = sorted(kept, key=lambda item: not relative(item).startswith(SLOW_FIRST))
    config.stash[COUNTS] = dict(counts)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its counts go to the controller
        workeroutput["parley_counts"] = session.config.stash.get(COUNTS, {})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the pytest-xdist controller: every worker collects the same tests; keep one's count."""
    counts = getattr(node, "workeroutput", {}).get("parley_counts")
    if counts is not None:
        node.config.stash[COUNTS] = counts


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    counts = config.stash.get(COUNTS, None)
    if counts is None:
        return
    backend = config.getoption("--backend")
    only = counts.get(BACKEND_ONLY[backend], 0)
    terminalreporter.write_line(
        f"store contract on {backend}: {counts.get('contract', 0)} tests; "
        f"{backend} only: {only}; run once: {counts.get('once', 0)}; "
        f"opt-in: {counts.get('opt_in', 0)}"
    )


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--backend"))


@pytest.fixture
def postgres_only(backend: str) -> None:
    """Asked for by a test (or its fixture) of PostgreSQL's own behaviour, such as several hubs
    on one database: deselected on SQLite."""
    assert backend == "postgres", "deselected on SQLite at collection"


@pytest.fixture
def sqlite_only(backend: str) -> None:
    """Asked for by a test of SQLite's own behaviour: deselected on PostgreSQL."""
    assert backend == "sqlite", "deselected on PostgreSQL at collection"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    return SqliteTemplate.make(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(scope="session")
def postgres_worker_database(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PostgresWorkerDatabase]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    database = PostgresWorkerDatabase(worker, tmp_path_factory.mktemp("postgres-home"))
    run_apart(database.create())
    try:
        yield database
    finally:
        run_apart(database.drop())


@pytest.fixture
async def database_url(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path
) -> AsyncIterator[str]:
    """A migrated, empty database for one test; with the ``fresh_database`` mark, a new one
    nothing has been done to (``tests/databases.py``)."""
    fresh = request.node.get_closest_marker("fresh_database") is not None
    if backend == "sqlite":
        path = tmp_path / "data" / SQLITE_FILE
        if not fresh:
            request.getfixturevalue("sqlite_template").copy_to(path)
        yield f"sqlite:///{path}"
        return
    if fresh:
        name = await create_pg_database("parley_t")
        try:
            yield pg_dsn(name)
        finally:
            await drop_pg_database(name)
        return
    shared: PostgresWorkerDatabase = request.getfixturevalue("postgres_worker_database")
    await shared.empty()
    yield shared.url
    await shared.check()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        home=tmp_path / "data",
        database_url=database_url,
        broadcast_interval_s=60,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def runtimes() -> StaticRuntimes:
    """Per-agent runtimes for a test (``runtimes.set(agent_id, ScriptedRuntime(...))``); agents
    without one fall back to the runtime their config names."""
    return StaticRuntimes(fallback=default_runtimes())


@pytest.fixture
async def hub(settings: Settings, clock: FakeClock, runtimes: StaticRuntimes) -> AsyncIterator[Hub]:
    the_hub = build_hub(settings, clock=clock, runtimes=runtimes)
    await the_hub.start(background=False)
    try:
        yield the_hub
    finally:
        await the_hub.stop()


@pytest.fixture
async def operator(hub: Hub) -> Principal:
    assert hub.operator_token is not None
    return await hub.identity.authenticate(hub.operator_token)


@dataclass
class AgentHandle:
    principal: Principal
    token: str

    @property
    def id(self) -> str:
        return self.principal.id


MakeAgent = Callable[..., Awaitable[AgentHandle]]


@pytest.fixture
def make_agent(hub: Hub, operator: Principal) -> MakeAgent:
    async def make(agent_id: str, **kwargs: object) -> AgentHandle:
        created = await hub.identity.create_agent(operator, AgentSpec(id=agent_id, **kwargs))  # type: ignore[arg-type]
        return AgentHandle(created.principal, created.token)

    return make


@pytest.fixture
async def api(hub: Hub) -> AsyncIterator[Callable[[str | None], httpx.AsyncClient]]:
    """A factory of in-process REST clients; pass a token (None for no auth)."""
    app = create_app(hub=hub)
    clients: list[httpx.AsyncClient] = []

    def client(token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://parley.test", headers=headers
        )
        clients.append(c)
        return c

    yield client
    for c in clients:
        await c.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def port() -> Iterator[int]:
    yield free_port()


@pytest.fixture(autouse=True)
def _block_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test calls a real model: keys are dummies, and runtimes refuse non-local endpoints and
    the real Claude Code / Codex executables (also in hub subprocesses, through the env)."""
    from parley.adapters.runtimes import guard

    monkeypatch.setattr(guard, "ALLOW_MODEL_REQUESTS", False)
    monkeypatch.setenv("PARLEY_ALLOW_MODEL_REQUESTS", "0")
    monkeypatch.setenv("OPENAI_API_KEY", "test-openai-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-anthropic-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
