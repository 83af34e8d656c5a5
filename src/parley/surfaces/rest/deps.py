"""Request dependencies: the hub, and the caller derived from the bearer token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.routing import APIRoute
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
    }
)
"""The server-sent event routes, the only ones that accept ``?token=``."""

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
    if token is None and is_stream_route(request):
        # Browsers' EventSource cannot set headers, so the event streams, and only they, take
        # ?token= (which the access log then shows redacted).
        token = request.query_params.get("token")
    return await hub.identity.authenticate(token)


def is_stream_route(request: Request) -> bool:
    """Whether the request was routed to one of the event-stream endpoints, judged by the
    matched route's template: ``DELETE /v1/tasks/stream`` (the task route with the id
    "stream") is not one."""
    route = request.scope.get("route")
    return request.method == "GET" and isinstance(route, APIRoute) and route.path in STREAM_ROUTES


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
