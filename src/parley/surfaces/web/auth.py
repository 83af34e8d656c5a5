"""Who is looking at the UI, and whether an action really comes from its own pages.

Every page needs a session (``Viewer``); every state-changing form carries the session's CSRF
token (synchronizer token) and must come from the hub's own origin (Origin, else Referer). The
cookie is HttpOnly, SameSite=Strict, Path=/ui, and Secure when the UI is served over https.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from fastapi import Depends, Request, Response

from parley.core.errors import Unauthenticated
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.surfaces.web.sessions import WebSession, WebSessions

COOKIE = "parley_session"
PREFIX = "/ui"


class SignInRequired(Exception):
    """No live session: pages answer with a redirect to the sign-in form."""


class ActionRefused(Exception):
    """A state-changing request without the session's CSRF token or from another origin."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@dataclass
class Viewer:
    """The signed-in principal and its session."""

    principal: Principal
    session: WebSession


def sessions_of(request: Request) -> WebSessions:
    found: WebSessions = request.app.state.web_sessions
    return found


def hub_of(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


async def get_viewer(request: Request) -> Viewer:
    sessions = sessions_of(request)
    session = sessions.find(request.cookies.get(COOKIE))
    if session is None:
        raise SignInRequired
    try:
        principal = await hub_of(request).identity.authenticate_digest(session.token_digest)
    except Unauthenticated:
        # The token was rotated or its principal deactivated: the session dies with it.
        sessions.end_for_token(session.token_digest)
        raise SignInRequired from None
    return Viewer(principal, session)


def same_origin(request: Request) -> bool:
    """Whether the request says it comes from a page of this hub (Origin, else Referer). A
    browser sends Origin with every POST; a request with neither is refused."""
    own = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == own
    referer = request.headers.get("referer")
    if referer is None:
        return False
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" == own


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form body (the request guard has bounded its size); the last value of a
    repeated field wins."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


async def get_action(request: Request) -> tuple[Viewer, dict[str, str]]:
    """The viewer and form of a state-changing request, once its origin and CSRF token hold."""
    viewer = await get_viewer(request)
    if not same_origin(request):
        raise ActionRefused(
            "this form was not sent from a page of this hub (Origin or Referer missing or "
            "foreign); reload the page and send it again"
        )
    form = await read_form(request)
    if not viewer.session.csrf_matches(form.get("csrf")):
        raise ActionRefused(
            "this form carries no valid CSRF token for your session; reload the page and send "
            "it again"
        )
    return viewer, form


def set_session_cookie(request: Request, response: Response, session_id: str) -> None:
    response.set_cookie(
        COOKIE,
        session_id,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=PREFIX,
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


ViewerDep = Annotated[Viewer, Depends(get_viewer)]
ActionDep = Annotated[tuple[Viewer, dict[str, str]], Depends(get_action)]
