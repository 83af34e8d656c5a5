"""Signing in with a token (a form, never a URL), with a one-time code, and signing out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from parley.core.errors import RateLimited, Unauthenticated
from parley.core.identity import hash_token
from parley.surfaces.web.auth import (
    COOKIE,
    PREFIX,
    ActionDep,
    clear_session_cookie,
    hub_of,
    read_form,
    same_origin,
    sessions_of,
    set_session_cookie,
)
from parley.surfaces.web.render import html, retry_after

router = APIRouter()


def _form(request: Request, error: str | None = None, status_code: int = 200) -> HTMLResponse:
    return html(request, "signin.html", {"error": error}, status_code)


@router.get("/signin", response_class=HTMLResponse)
async def signin_form(request: Request) -> HTMLResponse:
    return _form(request)


@router.post("/signin", response_model=None)
async def signin(request: Request) -> HTMLResponse | RedirectResponse:
    """Sign in with a token; the session remembers the token's digest, not the token. The
    origin check stops another site from signing a browser in as someone else."""
    if not same_origin(request):
        return _form(request, "This form was not sent from a page of this hub.", 403)
    token = (await read_form(request)).get("token", "").strip()
    try:
        principal = await hub_of(request).identity.authenticate(token)
    except Unauthenticated as exc:
        return _form(request, f"Sign-in refused ({exc.code}): {exc.message}", 401)
    return _signed_in(request, principal.id, hash_token(token))


def _signed_in(
    request: Request, principal_id: str, token_digest: str
) -> HTMLResponse | RedirectResponse:
    """The new session (it replaces the browser's old one), or the form again with why the
    sign-in was refused (too many sign-ins of this principal, or the hub's sessions full)."""
    try:
        session_id, _ = sessions_of(request).open(
            principal_id, token_digest, replacing=request.cookies.get(COOKIE)
        )
    except RateLimited as exc:
        refused = _form(request, f"Sign-in refused ({exc.code}): {exc.message}", 429)
        refused.headers["Retry-After"] = retry_after(exc)
        return refused
    response = RedirectResponse(f"{PREFIX}/", status_code=303)
    set_session_cookie(request, response, session_id)
    return response


@router.get("/signin/link", response_model=None)
async def signin_link(request: Request, key: str = "") -> HTMLResponse | RedirectResponse:
    """A one-time sign-in link (``parley demo`` prints one): the code works once, briefly.
    Its parameter is named ``key`` so that the hub's log redaction hides it (core/redact.py)."""
    digest = sessions_of(request).redeem(key)
    if digest is None:
        return _form(request, "This sign-in link was used already or has expired.", 401)
    try:
        principal = await hub_of(request).identity.authenticate_digest(digest)
    except Unauthenticated as exc:
        return _form(request, f"Sign-in refused ({exc.code}): {exc.message}", 401)
    return _signed_in(request, principal.id, digest)


@router.post("/signout")
async def signout(request: Request, action: ActionDep) -> RedirectResponse:
    sessions_of(request).close(request.cookies.get(COOKIE))
    response = RedirectResponse(f"{PREFIX}/signin", status_code=303)
    clear_session_cookie(request, response)
    return response
