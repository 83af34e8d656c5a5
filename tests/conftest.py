"""Shared fixtures. The store backend is chosen with ``--backend`` or ``PARLEY_TEST_BACKEND``
(sqlite, the default, or postgres); CI runs the whole suite once on each."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from parley.bootstrap import build_hub, default_runtimes
from parley.config import Settings
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.surfaces.rest.app import create_app
from parley.testing import FakeClock, StaticRuntimes

PG_ADMIN_URL = os.environ.get("PARLEY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        default=os.environ.get("PARLEY_TEST_BACKEND", "sqlite"),
        choices=["sqlite", "postgres"],
        help="store backend the suite runs against",
    )


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--backend"))


def _pg_dsn(db: str) -> str:
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    return f"{base}/{db}"


@pytest.fixture
async def database_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, empty database for one test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'data' / 'parley.db'}"
        return
    name = f"parley_t_{new_ulid().lower()}"
    admin = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield _pg_dsn(name)
    admin = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


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
