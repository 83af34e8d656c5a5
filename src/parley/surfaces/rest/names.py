"""Paths that take a name or an id prefix as well as an id.

``/v1/channels/design/messages`` is the channel named "design"; ``/v1/rooms/01JF3/meetings``
the room whose id starts with ``room-01JF3``. This middleware, behind the request guard (which
knows the caller), rewrites such a path to the full id before routing, so every route that takes
a channel or room id takes a name too, with one rule for all of them. A reference several
channels fit is refused ``ambiguous_channel`` (``ambiguous_room``) with the candidates; one that
fits nothing reaches the route unchanged and is refused there as unknown.

A logical session (``/v1/sessions/...``) is addressed by its name or the start of its id among
the operator's all and an agent's own (``ambiguous_session``). Mail, tasks, workers, meetings
and invitations (the invitee's own) have no names, but the CLI's tables show their ids shortened
to a unique start: such a start addresses them too (``/v1/mail/01JF3ABC``), among those the
caller may see (``ambiguous_message``, ``ambiguous_task``, ``ambiguous_worker``,
``ambiguous_meeting``, ``ambiguous_invitation`` when several fit). An agent joins a room it does
not see yet (``POST /v1/rooms/{room}/members``): the name it gives reaches the route unchanged,
and the rooms service resolves it among every room, for every surface alike."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.core import names
from parley.core.channels import LogicalSession
from parley.core.consent import Invitation
from parley.core.errors import Conflict, NotFound, ParleyError
from parley.core.identity import Principal
from parley.core.limits import check_text
from parley.service.hub import Hub
from parley.surfaces.rest import errors
from parley.surfaces.rest.deps import CALLER

_ULID = r"[0-9A-HJKMNP-TV-Z]{26}"
FULL_CHANNEL_ID = re.compile(_ULID)
FULL_ROOM_ID = re.compile(rf"room-{_ULID}")
FULL_WORKER_ID = re.compile(rf"w-{_ULID}")
FULL_MEETING_ID = re.compile(rf"mtg-{_ULID}")
FULL_SESSION_ID = re.compile(rf"vs-{_ULID}")

MAX_REF = 200
"""The longest reference that may address something: a channel's or a room's longest name. A
longer one (no id is as long) addresses nothing and is left for the route to refuse as unknown,
without a lookup: a prefix match on thousands of characters is work for nothing (and SQLite
refuses a pattern of 50,000 characters outright)."""

# (path prefix, words that are routes of their own at that place, what a full id looks like,
# what it addresses). The meetings' place comes before the rooms' that holds it.
PLACES: tuple[tuple[str, frozenset[str], re.Pattern[str], str], ...] = (
    ("/v1/channels/", frozenset({"private"}), FULL_CHANNEL_ID, "channel"),
    ("/v1/im/sessions/", frozenset(), FULL_CHANNEL_ID, "channel"),
    ("/v1/rooms/meetings/", frozenset(), FULL_MEETING_ID, "meeting"),
    ("/v1/rooms/", frozenset({"briefs", "done", "meetings", "stop"}), FULL_ROOM_ID, "room"),
    ("/v1/mail/", frozenset(), FULL_CHANNEL_ID, "message"),
    ("/v1/tasks/", frozenset(), FULL_CHANNEL_ID, "task"),
    ("/v1/workers/", frozenset(), FULL_WORKER_ID, "worker"),
    ("/v1/sessions/", frozenset(), FULL_SESSION_ID, "session"),
    ("/v1/invitations/", frozenset(), FULL_CHANNEL_ID, "invitation"),
)

# What has no name, addressed by the start of its id: (table, the id's own prefix).
BY_PREFIX_ONLY: dict[str, tuple[str, str]] = {
    "message": ("messages", ""),
    "task": ("tasks", ""),
    "worker": ("workers", "w-"),
    "meeting": ("meetings", "mtg-"),
    "invitation": ("invitations", ""),
}


class NameResolver:
    """Pure ASGI middleware: resolves the channel or room reference of a path to its id."""

    def __init__(self, app: ASGIApp, *, hub: Hub) -> None:
        self.app = app
        self.hub = hub
        self._resolvers: dict[str, Callable[[Principal, str], Awaitable[str | None]]] = {
            "channel": hub.channels.resolve,
            "room": hub.rooms.resolve,
            "session": self._session,
        }
        # How each kind without a name tells whether the caller may see one (refuses if not).
        self._getters: dict[str, Callable[[Principal, str], Awaitable[object]]] = {
            "message": hub.mail.get,
            "task": hub.tasks.get,
            "worker": hub.workers.get,
            "meeting": hub.meetings.get,
            "invitation": self._own_invitation,
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
            if not ref or ref in words or full.fullmatch(ref) or len(ref) > MAX_REF:
                return None
            # Text no store can hold (a NUL) is refused as the route would refuse it, before
            # it reaches a lookup.
            check_text(ref, f"{kind} reference")
            if kind in BY_PREFIX_ONLY:
                found = await self._by_prefix(kind, caller, ref)
            else:
                found = await self._resolvers[kind](caller, ref)
            if found is None or found == ref:
                return None
            return prefix + found + sep + rest
        return None

    async def _by_prefix(self, kind: str, caller: Principal, ref: str) -> str | None:
        """The one record of ``kind`` the caller may see whose id starts with ``ref``."""
        if len(ref.strip()) < names.MIN_PREFIX:
            return None
        table, head = BY_PREFIX_ONLY[kind]
        key = names.id_key(ref, head)
        async with self.hub.ctx.store.read() as tx:
            c = tx.table(table).c
            rows = await tx.select(
                table,
                c.id.startswith(key, autoescape=True),
                *_narrowed(kind, caller, tx),
                order_by=[c.id],
                limit=50,
            )
        seen: list[str] = []
        for row in rows:
            try:
                await self._getters[kind](caller, row.id)
            except ParleyError:
                continue
            seen.append(row.id)
        if len(seen) == 1:
            return seen[0]
        if not seen:
            return None
        shown = seen[: names.MAX_CANDIDATES]
        raise Conflict(
            f"{ref!r} could be any of {len(seen)} {kind}s: {', '.join(shown)}; give the full id "
            "or a longer id prefix",
            code=f"ambiguous_{kind}",
            candidates=[{"id": i} for i in shown],
        )

    async def _session(self, caller: Principal, ref: str) -> str | None:
        """A logical session by its name (``parley worker start --name``) or the start of its
        id, among the operator's all and an agent's own."""
        ref = ref.strip()
        async with self.hub.ctx.store.read() as tx:
            c = tx.table("sessions").c
            # Others' sessions are not looked at (nor may they crowd the caller's own out).
            own = [] if caller.is_operator else [c.agent_id == caller.id]
            named = await tx.select(
                "sessions", c.display_name == ref, *own, order_by=[c.id], limit=50
            )
            prefixed = []
            if len(ref) >= names.MIN_PREFIX:
                key = names.id_key(ref, "vs-")
                prefixed = await tx.select(
                    "sessions",
                    c.id.startswith(key, autoescape=True),
                    *own,
                    order_by=[c.id],
                    limit=50,
                )

        def seen(rows: list[LogicalSession]) -> list[names.Named]:
            return [
                names.Named(x.id, x.display_name)
                for x in rows
                if caller.is_operator or x.agent_id == caller.id
            ]

        return names.choose(ref, "session", seen(named), seen(prefixed))

    async def _own_invitation(self, caller: Principal, invitation_id: str) -> object:
        """An invitation is the invitee's to decide (and to find): anyone else's is refused."""
        async with self.hub.ctx.store.read() as tx:
            invitation: Invitation | None = await tx.get("invitations", invitation_id)
        if invitation is None or invitation.agent_id != caller.id:
            raise NotFound(f"no invitation {invitation_id!r}", code="invitation_not_found")
        return invitation

    @staticmethod
    def _rewrite(scope: Scope, path: str | None) -> None:
        if path is not None:
            scope["path"] = path
            scope["raw_path"] = quote(path).encode()


def _narrowed(kind: str, caller: Principal, tx: Any) -> list[Any]:
    """What the store itself can tell of the records of ``kind`` the caller may see: mail is
    its recipient's (and the original its sender's), an invitation its invitee's, a task its
    channel's readers', an agent's meetings its own room's. Others' rows are then not read one
    by one (each a read of its own), nor do they crowd the caller's own out of the rows looked
    at: on a busy hub many share the first characters of an id. The getter still decides of
    every row (and alone of workers, whose rule follows their trees)."""
    c = tx.table(BY_PREFIX_ONLY[kind][0]).c
    if kind == "invitation":
        return [c.agent_id == caller.id]
    if caller.is_operator:
        return []
    if kind == "message":
        return [(c.recipient_id == caller.id) | ((c.from_id == caller.id) & c.copy_of.is_(None))]
    if kind == "task":
        channels = tx.table("channels")
        members = channels.metadata.tables["channel_members"]
        own = channels.select().with_only_columns(channels.c.id)
        own = own.where(
            (channels.c.created_by == caller.id) | (channels.c.owner_agent_id == caller.id)
        )
        joined = members.select().with_only_columns(members.c.channel_id)
        joined = joined.where(members.c.member_id == caller.id)
        return [c.channel_id.in_(own) | c.channel_id.in_(joined)]
    if kind == "meeting" and caller.kind == "agent":
        rooms = tx.table("room_members")
        mine = rooms.select().with_only_columns(rooms.c.room_id).where(rooms.c.id == caller.id)
        return [c.room_id.in_(mine)]
    return []
