"""Request dependencies: the hub, and the caller the request guard derived from the bearer
token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from parley.core.identity import Principal
from parley.core.limits import check_text
from parley.service.hub import Hub

STREAM_ROUTES = frozenset(
    {
        "/v1/agents/{owner}/inbox/stream",
        "/v1/channels/{channel_id}/stream",
        "/v1/events/stream",
        "/v1/rooms/meetings/{meeting_id}/stream",
        "/v1/workers/{worker_id}/stream",
    }
)
"""The server-sent event routes, the only ones that accept ``?token=``."""

CALLER = "caller"
"""Where in ``request.state`` the request guard leaves the principal it authenticated."""

CALLER_TOKEN = "caller_token"
"""Where in ``request.state`` the guard leaves the token it authenticated, for an event stream
to check again when its caller's tokens are revoked (sse.py)."""

_bearer = HTTPBearer(auto_error=False, description="A parley token: 'Authorization: Bearer pt_…'")


async def get_hub(request: Request) -> Hub:
    # Async on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, a thread
    # hop on every request.
    hub: Hub = request.app.state.hub
    return hub


async def get_caller(
    request: Request,
    # Unused here (the guard read the token): it puts the bearer scheme in the OpenAPI document.
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal the request guard authenticated before the body was read: the guard runs
    in front of every route and refuses a request without a valid token (guard.py), so a
    route's caller is authenticated once."""
    caller: Principal = getattr(request.state, CALLER)
    return caller


async def refuse_unstorable_url(request: Request) -> None:
    """Refuse a NUL character in the path or query before any id or filter in it reaches a
    store: PostgreSQL cannot even compare text holding one (the app applies this to every
    route)."""
    check_text(request.url.path, "the path")
    for key, value in request.query_params.multi_items():
        check_text(key, "a query parameter name")
        check_text(value, f"query parameter {key!r}")


HubDep = Annotated[Hub, Depends(get_hub)]
Caller = Annotated[Principal, Depends(get_caller)]
