"""Request dependencies: the hub, and the caller derived from the bearer token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from parley.core.identity import Principal
from parley.core.limits import check_text
from parley.service.hub import Hub

_bearer = HTTPBearer(auto_error=False, description="A parley token: 'Authorization: Bearer pt_…'")


async def get_hub(request: Request) -> Hub:
    # Async on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, a thread
    # hop on every request.
    hub: Hub = request.app.state.hub
    return hub


async def get_caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    hub: Hub = request.app.state.hub
    token = credentials.credentials if credentials is not None else None
    if token is None:
        # Browsers' EventSource cannot set headers; allow ?token= on stream endpoints only.
        token = request.query_params.get("token") if request.url.path.endswith("/stream") else None
    return await hub.identity.authenticate(token)


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
