"""One-time sign-in links to the web UI for the caller (``parley ui``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from parley.core.identity import hash_token
from parley.surfaces.rest.deps import CALLER_TOKEN, Caller
from parley.surfaces.rest.errors import ERROR_RESPONSES
from parley.surfaces.web.sessions import WebSessions

router = APIRouter(tags=["web"], responses=ERROR_RESPONSES)

# How long a link works (once).
SIGN_IN_LINK_TTL_S = 600.0


class SigninLink(BaseModel):
    path: str
    expires_in_s: float


@router.post("/v1/ui/signin-links", response_model=SigninLink, status_code=201)
async def issue_signin_link(request: Request, caller: Caller) -> SigninLink:
    """A link that signs a browser into the web UI as the caller, once and within minutes:
    it carries a one-time code, never the token."""
    token: str = getattr(request.state, CALLER_TOKEN)
    sessions: WebSessions = request.app.state.web_sessions
    code = sessions.issue_code(hash_token(token), ttl_s=SIGN_IN_LINK_TTL_S)
    return SigninLink(path=f"/ui/signin/link?key={code}", expires_in_s=SIGN_IN_LINK_TTL_S)
