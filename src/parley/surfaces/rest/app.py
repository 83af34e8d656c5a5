"""The FastAPI application."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.routing import Route

from parley import __version__
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.service.hub import Hub
from parley.surfaces.mcp.http import McpEndpoint
from parley.surfaces.rest import errors
from parley.surfaces.rest.deps import refuse_unstorable_url
from parley.surfaces.rest.guard import RequestGuard
from parley.surfaces.rest.routers import (
    agents,
    bridge,
    channels,
    events,
    health,
    mail,
    mailroom,
    membership,
    metrics,
    rooms,
    streams,
    turns,
    workers,
)
from parley.surfaces.web.app import mount as mount_web_ui

DESCRIPTION = """\
parley is a coordination hub for long-running AI agent sessions: durable mailboxes, channels and
moderated discussions. Every endpoint except the health checks needs
`Authorization: Bearer <token>`; the token decides who is speaking. Errors are JSON
`{code, message, details}` with a stable `code`.
"""


SETTLES_WHEN_WARM = 3
"""How many of a server's first full collections are followed by another freeze."""


def settle_heap() -> None:
    """Move what a started server has loaded (modules, the app, the hub) out of the garbage
    collector's full passes: it lives as long as the process, and scanning it again and again
    paused a busy hub for ~150 ms at a time (measured by bench/mail.py).

    What the first requests import lazily (routers' schemas, the MCP SDK, the web UI's
    templates) arrives after this freeze and made later full passes grow run by run (13 to
    117 ms). So the first few full collections are each followed by a freeze too: right after
    one, what is left is alive, and it is the warm server. Only a few: a frozen object is never
    collected, and a request's garbage frozen while still alive would be kept for good."""
    gc.collect()
    gc.freeze()
    _warm.left = SETTLES_WHEN_WARM
    if _warm.settle not in gc.callbacks:
        gc.callbacks.append(_warm.settle)


class _WarmSettles:
    """The freezes after a server's first full collections (one callback per process)."""

    left = 0

    def settle(self, phase: str, info: dict[str, int]) -> None:
        if self.left and phase == "stop" and info["generation"] == 2:
            self.left -= 1
            gc.freeze()


_warm = _WarmSettles()


def create_app(settings: Settings | None = None, *, hub: Hub | None = None) -> FastAPI:
    """Build the app. Given a started ``hub`` the app uses it as is; otherwise the app builds
    one from ``settings`` and starts and stops it with its lifespan."""
    own_hub = hub is None
    the_hub = hub if hub is not None else build_hub(settings or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if own_hub:
            await the_hub.start()
            settle_heap()
        try:
            async with mcp_endpoint.run():
                yield
        finally:
            if own_hub:
                await the_hub.stop()

    app = FastAPI(
        title="parley",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(refuse_unstorable_url)],
    )
    app.state.hub = the_hub
    # The MCP server (S3) at /mcp over Streamable HTTP; its sessions live in this lifespan.
    mcp_endpoint = McpEndpoint(the_hub)
    app.router.routes.append(Route("/mcp", mcp_endpoint))
    errors.install(app)
    for module in (
        health,
        agents,
        mail,
        mailroom,
        events,
        streams,
        channels,
        membership,
        turns,
        metrics,
        rooms,
        workers,
        bridge,
    ):
        app.include_router(module.router)
    # The web UI at /ui (S5), outside the OpenAPI document; its pages call the same services.
    mount_web_ui(app)
    # Around every route, /mcp included: authenticate before any body byte is read, bound the
    # body, and end a request whose token is revoked while it is open.
    app.add_middleware(RequestGuard, hub=the_hub)
    return app
