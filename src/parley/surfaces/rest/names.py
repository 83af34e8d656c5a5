"""Channel and room paths that take a name or an id prefix as well as an id.

``/v1/channels/design/messages`` is the channel named "design"; ``/v1/rooms/01JF3/meetings``
the room whose id starts with ``room-01JF3``. This middleware, behind the request guard (which
knows the caller), rewrites such a path to the full id before routing, so every route that takes
a channel or room id takes a name too, with one rule for all of them. A reference several
channels fit is refused ``ambiguous_channel`` (``ambiguous_room``) with the candidates; one that
fits nothing reaches the route unchanged and is refused there as unknown."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.core.errors import ParleyError
from parley.core.identity import Principal
from parley.core.limits import check_text
from parley.service.hub import Hub
from parley.surfaces.rest import errors
from parley.surfaces.rest.deps import CALLER

_ULID = r"[0-9A-HJKMNP-TV-Z]{26}"
FULL_CHANNEL_ID = re.compile(_ULID)
FULL_ROOM_ID = re.compile(rf"room-{_ULID}")

# (path prefix, words that are routes of their own at that place, what a full id looks like)
PLACES: tuple[tuple[str, frozenset[str], re.Pattern[str], str], ...] = (
    ("/v1/channels/", frozenset({"private"}), FULL_CHANNEL_ID, "channel"),
    ("/v1/im/sessions/", frozenset(), FULL_CHANNEL_ID, "channel"),
    ("/v1/rooms/", frozenset({"briefs", "done", "meetings", "stop"}), FULL_ROOM_ID, "room"),
)


class NameResolver:
    """Pure ASGI middleware: resolves the channel or room reference of a path to its id."""

    def __init__(self, app: ASGIApp, *, hub: Hub) -> None:
        self.app = app
        self.hub = hub
        self._resolvers: dict[str, Callable[[Principal, str], Awaitable[str | None]]] = {
            "channel": hub.channels.resolve,
            "room": hub.rooms.resolve,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            caller = scope.get("state", {}).get(CALLER)
            if caller is not None:
                try:
                    self._rewrite(scope, await self._resolved(scope, caller))
                except ParleyError as exc:
                    response = await errors.parley_error(Request(scope), exc)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _resolved(self, scope: Scope, caller: Principal) -> str | None:
        path: str = scope["path"]
        for prefix, words, full, kind in PLACES:
            if not path.startswith(prefix):
                continue
            ref, sep, rest = path[len(prefix) :].partition("/")
            if not ref or ref in words or full.fullmatch(ref):
                return None
            # Text no store can hold (a NUL) is refused as the route would refuse it, before
            # it reaches a lookup.
            check_text(ref, f"{kind} reference")
            found = await self._resolvers[kind](caller, ref)
            if found is None or found == ref:
                return None
            return prefix + found + sep + rest
        return None

    @staticmethod
    def _rewrite(scope: Scope, path: str | None) -> None:
        if path is not None:
            scope["path"] = path
            scope["raw_path"] = quote(path).encode()
