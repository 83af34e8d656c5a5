"""Web sign-in sessions and one-time sign-in codes, kept in the hub's process.

A session is created when a person signs in with a token: the browser gets a random session id
in an HttpOnly cookie, the hub keeps only the id's hash, the digest of the token (never the token)
and the session's CSRF token. Every request re-checks the token digest with the identity
service, so rotating a principal's token ends its sessions at the next request (and its open
live streams at once, see ``live.py``).

Why in-process rather than in the store: a session is worth less than the token it came from and
costs nothing to recreate, so a hub restart signing everyone out is acceptable, and it needs no
schema. The cost is that hubs sharing one PostgreSQL do not share sessions: a load balancer in
front of several hubs must keep a browser on one hub.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_IDLE_S = 8 * 3600.0
SESSION_MAX_S = 24 * 3600.0
CODE_TTL_S = 300.0
MAX_SESSIONS = 10_000
MAX_CODES = 100
MAX_FLASH = 5


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class WebSession:
    """What the hub remembers of a signed-in browser."""

    principal_id: str
    token_digest: str
    csrf: str
    created: float
    last_seen: float
    # Messages for the next page: ("ok" | "error", text).
    flash: list[tuple[str, str]] = field(default_factory=list)

    def say(self, level: str, text: str) -> None:
        """A message for the next page; only the latest few are kept (no page may be viewed
        between many actions)."""
        self.flash.append((level, text))
        del self.flash[:-MAX_FLASH]

    def csrf_matches(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf.encode())


@dataclass(frozen=True)
class _Code:
    token_digest: str
    expires: float


class WebSessions:
    """Sessions by the hash of their id, oldest first so the oldest can be dropped when full."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        idle_s: float = SESSION_IDLE_S,
        max_s: float = SESSION_MAX_S,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self._clock = clock
        self._idle_s = idle_s
        self._max_s = max_s
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, WebSession] = OrderedDict()
        self._codes: dict[str, _Code] = {}

    def open(self, principal_id: str, token_digest: str) -> tuple[str, WebSession]:
        """A new session; returns the id for the cookie (the hub keeps only its hash)."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        session = WebSession(
            principal_id=principal_id,
            token_digest=token_digest,
            csrf=secrets.token_urlsafe(32),
            created=now,
            last_seen=now,
        )
        self._sessions[_digest(session_id)] = session
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return session_id, session

    def find(self, session_id: str | None) -> WebSession | None:
        """The live session with this id, or None (unknown, idle too long, or too old)."""
        if not session_id:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen >= self._idle_s or now - session.created >= self._max_s:
            del self._sessions[key]
            return None
        session.last_seen = now
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(_digest(session_id), None)

    def end_for_token(self, token_digest: str) -> int:
        """End every session signed in with this token (its token no longer holds)."""
        ended = [k for k, s in self._sessions.items() if s.token_digest == token_digest]
        for key in ended:
            del self._sessions[key]
        return len(ended)

    def issue_code(self, token_digest: str, ttl_s: float = CODE_TTL_S) -> str:
        """A single-use, short-lived code that signs a browser in as the token's principal:
        what a sign-in link carries instead of the token itself."""
        now = self._clock()
        self._codes = {k: c for k, c in self._codes.items() if c.expires > now}
        if len(self._codes) >= MAX_CODES:
            self._codes.pop(next(iter(self._codes)))
        code = secrets.token_urlsafe(24)
        self._codes[_digest(code)] = _Code(token_digest, now + ttl_s)
        return code

    def redeem(self, code: str | None) -> str | None:
        """The token digest a code stands for, once: a second use, or a late one, gets None."""
        if not code:
            return None
        found = self._codes.pop(_digest(code), None)
        if found is None or found.expires <= self._clock():
            return None
        return found.token_digest
