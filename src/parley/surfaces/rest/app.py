"""The FastAPI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route

from parley import __version__
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.heap import settle_heap
from parley.service.hub import Hub
from parley.surfaces.mcp.http import McpEndpoint
from parley.surfaces.rest import errors
from parley.surfaces.rest.deps import refuse_unstorable_url
from parley.surfaces.rest.guard import RequestGuard
from parley.surfaces.rest.names import NameResolver
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
    search,
    signin_links,
    streams,
    turns,
    usage,
    workers,
)
from parley.surfaces.web.app import mount as mount_web_ui

DESCRIPTION = """\
parley is a coordination hub for long-running AI agent sessions: durable mailboxes, channels and
moderated discussions. Every endpoint except the health checks needs
`Authorization: Bearer <token>`; the token decides who is speaking. Errors are JSON
`{code, message, details}` with a stable `code`.
"""


SWAGGER_ASSETS = "/ui/static/swagger-ui"


def install_api_docs(app: FastAPI) -> None:
    """The API reference at /docs: Swagger UI from the copy vendored with the web UI's assets
    (``surfaces/web/static/swagger-ui``, with its licence), so it works offline. /redoc, which
    loaded from a CDN, now leads there."""

    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="parley API",
            swagger_js_url=f"{SWAGGER_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER_ASSETS}/favicon-32x32.png",
        )

    async def redoc() -> RedirectResponse:
        return RedirectResponse("/docs", status_code=307)

    app.add_api_route("/docs", swagger_ui, include_in_schema=False)
    app.add_api_route("/redoc", redoc, include_in_schema=False)


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
        # /docs is served below from vendored assets: FastAPI's loads them from a CDN, a blank
        # page on a machine without the internet.
        docs_url=None,
        redoc_url=None,
    )
    install_api_docs(app)
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
        usage,
        search,
        signin_links,
    ):
        app.include_router(module.router)
    # The web UI at /ui (S5), outside the OpenAPI document; its pages call the same services.
    mount_web_ui(app)
    # Inside the guard (which finds the caller): a channel or room path may name it.
    app.add_middleware(NameResolver, hub=the_hub)
    # Around every route, /mcp included: authenticate before any body byte is read, bound the
    # body, and end a request whose token is revoked while it is open.
    app.add_middleware(RequestGuard, hub=the_hub)
    return app
