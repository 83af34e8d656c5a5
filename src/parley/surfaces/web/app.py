"""The web UI (S5), mounted by the REST app at ``/ui``; the root redirects there.

Every route is left out of the OpenAPI document: the document describes the API, and the tests
that walk it (security, fuzzing) stay about the API. Pages reach the hub only through its service
layer, as the signed-in principal.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from parley.core.errors import ParleyError, RateLimited
from parley.surfaces.rest import errors
from parley.surfaces.web import (
    attention,
    channels,
    create,
    insight,
    meetings,
    missing,
    pages,
    shared,
    signin,
    turns,
    workers,
)
from parley.surfaces.web.auth import PREFIX, ActionRefused, SignInRequired
from parley.surfaces.web.feeds import LiveStreams
from parley.surfaces.web.render import HERE, html, retry_after
from parley.surfaces.web.sessions import WebSessions

AREAS = (
    signin,
    shared,
    attention,
    pages,
    channels,
    turns,
    meetings,
    workers,
    insight,
    create,
    missing,
)
"""The UI's modules, each with a ``router`` mounted under ``/ui`` (``missing``, the catch-all
that answers an unknown page, last)."""


async def _sign_in_required(request: Request, exc: Exception) -> RedirectResponse | HTMLResponse:
    if request.headers.get("accept", "").startswith("text/event-stream"):
        # A live stream whose session is gone: 401 ends it (the page shows the sign-in link).
        return HTMLResponse("sign in again", status_code=401)
    if request.method == "GET" and request.url.path != f"{PREFIX}/":
        # Back to the page asked for once signed in (signin.next_page checks it is one of ours).
        wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{PREFIX}/signin?{urlencode({'next': wanted})}", status_code=303)
    return RedirectResponse(f"{PREFIX}/signin", status_code=303)


async def _favicon() -> FileResponse:
    # Asked for by every browser on every page, before any sign-in.
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


async def _action_refused(request: Request, exc: Exception) -> HTMLResponse:
    assert isinstance(exc, ActionRefused)
    return html(request, "refused.html", {"message": exc.message}, 403)


async def _refused(request: Request, exc: Exception) -> Response:
    """A refusal from the service layer: an HTML page with its code and message under /ui, the
    API's JSON error everywhere else."""
    assert isinstance(exc, ParleyError)
    if not request.url.path.startswith(PREFIX + "/"):
        return await errors.parley_error(request, exc)
    message = f"Refused ({exc.code}): {exc.message}"
    response = html(request, "refused.html", {"message": message}, errors.status_for(exc))
    if isinstance(exc, RateLimited):
        response.headers["Retry-After"] = retry_after(exc)
    return response


def mount(app: FastAPI, sessions: WebSessions | None = None) -> WebSessions:
    """Add the UI to ``app``, whose ``state.hub`` is the hub, after the API's error handlers
    (the ParleyError one is wrapped); returns the session store, with which ``parley demo``
    issues a one-time sign-in link."""
    settings = app.state.hub.settings
    web_sessions = sessions or WebSessions.from_settings(settings)
    app.state.web_sessions = web_sessions
    app.state.web_live = LiveStreams(
        app.state.hub,
        web_sessions,
        per_session=settings.ui_live_streams_per_session,
        per_principal=settings.ui_live_streams_per_principal,
        refresh_s=settings.ui_live_refresh_s,
    )
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    for module in AREAS:
        app.include_router(module.router, prefix=PREFIX, include_in_schema=False)
    app.add_api_route(
        "/",
        lambda: RedirectResponse(f"{PREFIX}/", status_code=307),
        include_in_schema=False,
    )
    app.add_api_route("/favicon.ico", _favicon, include_in_schema=False)
    app.add_exception_handler(SignInRequired, _sign_in_required)
    app.add_exception_handler(ActionRefused, _action_refused)
    app.add_exception_handler(ParleyError, _refused)
    return web_sessions
