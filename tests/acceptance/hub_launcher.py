"""Run a parley hub over HTTP for acceptance tests, as its own process.

    python hub_launcher.py --home DIR --database-url URL --port PORT

The hub writes its operator token to ``<home>/operator.token`` once started, so a test can
act as the operator, and prints ``READY`` on stdout once it accepts connections.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from parley.bootstrap import build_hub
from parley.config import Settings, operator_token_path
from parley.surfaces.rest.app import create_app


def build_app(home: Path, database_url: str) -> FastAPI:
    hub = build_hub(Settings(home=home, database_url=database_url))
    app = create_app(hub=hub)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(the_app: FastAPI) -> AsyncIterator[None]:
        await hub.start()
        if hub.operator_token is not None:
            path = operator_token_path(home)
            path.write_text(hub.operator_token + "\n")
            path.chmod(0o600)
        try:
            async with inner(the_app):
                yield
        finally:
            await hub.stop()

    app.router.lifespan_context = lifespan
    return app


READY = "READY"


class AnnouncingServer(uvicorn.Server):
    """A uvicorn server that says when it is listening, so a parent can wait on its stdout."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(READY, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = uvicorn.Config(
        build_app(args.home, args.database_url),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    AnnouncingServer(config).run()


if __name__ == "__main__":
    main()
