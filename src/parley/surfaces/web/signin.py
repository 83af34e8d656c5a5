"""Signing in with a token (a form, never a URL), with a one-time code, and signing out."""

from __future__ import annotations

from urllib.parse import urlsplit

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


def next_page(wanted: str | None) -> str:
    """Where a sign-in goes: the page that asked for it when that is a page of this UI (never
    another site, nor the sign-in itself), else the overview."""
    if (
        wanted
        and wanted.startswith(PREFIX + "/")
        and not wanted.startswith(f"{PREFIX}/signin")
        and "\\" not in wanted
        and not urlsplit(wanted).netloc
        and len(wanted) <= 2048
    ):
        return wanted
    return f"{PREFIX}/"


ISSUE_HINT = "the operator issues one with 'parley token issue <name>'"
# What a refusal says on this form: the service's own words speak of HTTP headers, which a
# person pasting a token into a page never sends.
REFUSALS = {
    "missing_token": f"No token was given: paste your parley token ({ISSUE_HINT}).",
    "invalid_token": (
        "That token is not valid: it is unknown, revoked, or belongs to an agent or person "
        f"who was deactivated. Paste a current one ({ISSUE_HINT})."
    ),
}


def refusal(exc: Unauthenticated) -> str:
    """A sign-in refusal in this form's words, with its stable code."""
    return f"Sign-in refused ({exc.code}): {REFUSALS.get(exc.code, exc.message)}"


def _form(
    request: Request, error: str | None = None, status_code: int = 200, wanted: str | None = None
) -> HTMLResponse:
    following = next_page(wanted)
    shown = following if following != f"{PREFIX}/" else ""
    return html(request, "signin.html", {"error": error, "next": shown}, status_code)


@router.get("/signin", response_class=HTMLResponse)
async def signin_form(request: Request, next: str = "") -> HTMLResponse:
    return _form(request, wanted=next)


@router.post("/signin", response_model=None)
async def signin(request: Request) -> HTMLResponse | RedirectResponse:
    """Sign in with a token; the session remembers the token's digest, not the token. The
    origin check stops another site from signing a browser in as someone else."""
    if not same_origin(request):
        return _form(request, "This form was not sent from a page of this hub.", 403)
    form = await read_form(request)
    token, wanted = form.get("token", "").strip(), form.get("next")
    try:
        principal = await hub_of(request).identity.authenticate(token)
    except Unauthenticated as exc:
        return _form(request, refusal(exc), 401, wanted)
    return _signed_in(request, principal.id, hash_token(token), wanted)


def _signed_in(
    request: Request, principal_id: str, token_digest: str, wanted: str | None = None
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
    response = RedirectResponse(next_page(wanted), status_code=303)
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
        return _form(request, refusal(exc), 401)
    return _signed_in(request, principal.id, digest)


@router.post("/signout")
async def signout(request: Request, action: ActionDep) -> RedirectResponse:
    sessions_of(request).close(request.cookies.get(COOKIE))
    response = RedirectResponse(f"{PREFIX}/signin", status_code=303)
    clear_session_cookie(request, response)
    return response
