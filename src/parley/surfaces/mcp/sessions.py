"""How many MCP sessions each principal holds, over every profile, and which one ends first.

The MCP SDK keeps a session from its ``initialize`` until the client deletes it or it has been
idle too long, in one session manager per profile, with one limit for all comers: left alone,
one principal could hold the hub's memory and lock everyone else out. The table here counts
every principal's sessions over all profiles together and decides whether one more may open:

* a principal holds at most ``mcp_sessions_per_principal`` sessions; one more closes its session
  that has been idle longest, or is refused (``mcp_sessions_exhausted``) when each of them has a
  request in flight;
* the hub holds at most ``mcp_sessions_max``, and the last ``mcp_sessions_operator_reserve`` of
  them only operators may take; a principal that may take no more closes one of its own idle
  sessions, or is refused (``mcp_sessions_hub_full``).

The table only keeps the books, synchronously, so that two openings never both take the last
place; :class:`~parley.surfaces.mcp.http.McpEndpoint` opens and ends the sessions themselves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from parley.core.errors import RateLimited
from parley.core.identity import Principal
from parley.core.settings import HubSettings

RETRY_AFTER_S = 1.0
"""The ``Retry-After`` of a refusal: a place frees as soon as a request ends, which the hub
cannot foresee."""


@dataclass(eq=False, slots=True)
class McpSession:
    """One open MCP session: whose, on which profile, opened with which token (its digest)."""

    id: str
    principal_id: str
    profile: str
    token_digest: str
    in_flight: int = 0
    idle_since: float = 0.0


@dataclass(eq=False, slots=True)
class Opening:
    """A place held for a session while its opening request is answered."""

    principal_id: str
    settled: bool = False


@dataclass(eq=False, slots=True)
class _Holding:
    # Least recently busy first: the first idle one is the one idle longest.
    sessions: OrderedDict[str, McpSession] = field(default_factory=OrderedDict)
    openings: int = 0

    def __len__(self) -> int:
        return len(self.sessions) + self.openings


class SessionTable:
    """The open MCP sessions of every principal, and the places held for sessions opening."""

    def __init__(self, settings: HubSettings, clock: Callable[[], float]) -> None:
        self.per_principal = settings.mcp_sessions_per_principal
        self.most = settings.mcp_sessions_max
        self.reserve = settings.mcp_sessions_operator_reserve
        self._clock = clock
        self._sessions: dict[str, McpSession] = {}
        self._holdings: dict[str, _Holding] = {}
        self._openings = 0

    @property
    def total(self) -> int:
        """Sessions open and opening, every principal counted."""
        return len(self._sessions) + self._openings

    def held(self, principal_id: str) -> int:
        """Sessions open and opening of one principal."""
        holding = self._holdings.get(principal_id)
        return 0 if holding is None else len(holding)

    def sessions_of(self, principal_id: str) -> list[McpSession]:
        holding = self._holdings.get(principal_id)
        return [] if holding is None else list(holding.sessions.values())

    def all_sessions(self) -> list[McpSession]:
        return list(self._sessions.values())

    def admit(self, principal: Principal) -> tuple[Opening, McpSession | None]:
        """Hold a place for one more session of ``principal``. Also returns the principal's
        session to close to make room, already forgotten here; raises when there is none."""
        holding = self._holdings.get(principal.id)
        held = 0 if holding is None else len(holding)
        limit = self.most if principal.is_operator else self.most - self.reserve
        own_full = held >= self.per_principal
        hub_full = self.total >= limit
        victim = None
        if own_full or hub_full:
            # In exchange for one of its own idle sessions, which leaves every count as it was.
            if holding is not None:
                victim = next((s for s in holding.sessions.values() if not s.in_flight), None)
            if victim is None:
                raise self._exhausted(principal) if own_full else self._hub_full(principal, limit)
            self._forget(victim)
        holding = self._holdings.setdefault(principal.id, _Holding())
        holding.openings += 1
        self._openings += 1
        return Opening(principal.id), victim

    def opened(self, opening: Opening, session: McpSession) -> None:
        """The opening request was answered with ``session``: it takes the held place."""
        self._settle(opening)
        session.idle_since = self._clock()
        self._sessions[session.id] = session
        self._holdings.setdefault(session.principal_id, _Holding()).sessions[session.id] = session

    def release(self, opening: Opening) -> None:
        """Give back the place of an opening that opened nothing (refused, failed, gone)."""
        if not opening.settled:
            self._settle(opening)
            self._drop_if_empty(opening.principal_id)

    def begin(self, session_id: str, principal_id: str) -> McpSession | None:
        """A request of ``principal_id`` for one of its sessions starts; None if the table
        does not know that session as the principal's (the SDK answers such a request)."""
        session = self._sessions.get(session_id)
        if session is None or session.principal_id != principal_id:
            return None
        session.in_flight += 1
        return session

    def end(self, session: McpSession) -> None:
        """A request that :meth:`begin` counted has ended."""
        session.in_flight -= 1
        if session.in_flight or self._sessions.get(session.id) is not session:
            return
        session.idle_since = self._clock()
        self._holdings[session.principal_id].sessions.move_to_end(session.id)

    def forget(self, session_id: str) -> McpSession | None:
        """Stop counting a session (it ended, or is being ended); None if it was not counted."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._forget(session)
        return session

    def idle_since(self, moment: float) -> list[McpSession]:
        """The sessions without a request in flight since ``moment`` or earlier."""
        return [s for s in self._sessions.values() if not s.in_flight and s.idle_since <= moment]

    def _forget(self, session: McpSession) -> None:
        del self._sessions[session.id]
        del self._holdings[session.principal_id].sessions[session.id]
        self._drop_if_empty(session.principal_id)

    def _settle(self, opening: Opening) -> None:
        opening.settled = True
        self._holdings[opening.principal_id].openings -= 1
        self._openings -= 1

    def _drop_if_empty(self, principal_id: str) -> None:
        holding = self._holdings.get(principal_id)
        if holding is not None and not len(holding):
            del self._holdings[principal_id]

    def _exhausted(self, principal: Principal) -> RateLimited:
        return RateLimited(
            f"{principal.id!r} already holds {self.per_principal} MCP sessions, each with a "
            "request in flight; end one you no longer use (DELETE /mcp with its mcp-session-id "
            "header, as MCP clients do when they close) or retry once one of its requests has "
            "finished (the operator sets the limit with PARLEY_MCP_SESSIONS_PER_PRINCIPAL)",
            code="mcp_sessions_exhausted",
            retry_after=RETRY_AFTER_S,
            limit=self.per_principal,
        )

    def _hub_full(self, principal: Principal, limit: int) -> RateLimited:
        return RateLimited(
            f"the hub already holds {self.total} MCP sessions, as many as {principal.id!r} may "
            f"find open when it opens one ({limit} of {self.most}: the rest are kept for "
            f"operators), and {principal.id!r} has no idle session to close in exchange; retry "
            "once sessions have ended (the operator sets the limits with "
            "PARLEY_MCP_SESSIONS_MAX and PARLEY_MCP_SESSIONS_OPERATOR_RESERVE)",
            code="mcp_sessions_hub_full",
            retry_after=RETRY_AFTER_S,
            limit=limit,
        )
