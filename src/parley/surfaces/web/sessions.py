"""Web sign-in sessions and one-time sign-in codes, kept in the hub's process.

A session is created when a person signs in with a token: the browser gets a random session id
in an HttpOnly cookie, the hub keeps only the id's hash, the digest of the token (never the token)
and the session's CSRF token. Every request re-checks the token digest with the identity
service, so rotating a principal's token ends its sessions at the next request (and its open
live streams at once, see ``live.py``).

Bounds: a principal holds at most ``per_principal`` sessions (one more closes its own oldest), and
signs in at most ``signins_per_minute`` times a minute (``signin_rate_limited``); the store holds
at most ``max_sessions`` in all, and when it is full a sign-in is refused (``ui_sessions_full``):
no principal's sign-in ever ends another principal's session. Whenever a session ends (signed
out, replaced, evicted, expired or its token revoked) ``on_end`` is told, and the live streams
opened with it end at once.

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
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from parley.config import Settings
from parley.core.errors import RateLimited

SESSION_IDLE_S = 8 * 3600.0
SESSION_MAX_S = 24 * 3600.0
CODE_TTL_S = 300.0
MAX_SESSIONS = 10_000
SESSIONS_PER_PRINCIPAL = 20
SIGNINS_PER_MINUTE = 30
SIGNIN_WINDOW_S = 60.0
MAX_CODES = 100
CODES_PER_TOKEN = 5
"""Sign-in codes one token may hold at once: issuing more drops its own oldest, never another's
(one agent asking for links in a loop would otherwise push the operator's out)."""
MAX_FLASH = 5

EndReason = Literal["signed_out", "replaced", "evicted", "expired", "revoked"]
"""Why a session ended: its browser signed out or signed in anew, its principal opened one
session too many, it was idle or old too long, or its token no longer holds."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class WebSession:
    """What the hub remembers of a signed-in browser."""

    key: str  # the hash of the session id: the store's key, never the id itself
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
    """Sessions by the hash of their id, oldest first; each principal's, oldest first."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        idle_s: float = SESSION_IDLE_S,
        max_s: float = SESSION_MAX_S,
        max_sessions: int = MAX_SESSIONS,
        per_principal: int = SESSIONS_PER_PRINCIPAL,
        signins_per_minute: int = SIGNINS_PER_MINUTE,
    ) -> None:
        self._clock = clock
        self._idle_s = idle_s
        self._max_s = max_s
        self._max_sessions = max_sessions
        self._per_principal = per_principal
        self._signins_per_minute = signins_per_minute
        self._sessions: OrderedDict[str, WebSession] = OrderedDict()
        # Each principal's session keys, oldest first (a dict as an ordered set).
        self._of: dict[str, dict[str, None]] = {}
        # When each principal signed in within the last minute.
        self._signins: dict[str, deque[float]] = {}
        self._codes: dict[str, _Code] = {}
        self.on_end: Callable[[WebSession, EndReason], None] | None = None
        """Told of every session that ends, whatever the reason (the live streams end too)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> WebSessions:
        return cls(
            max_sessions=settings.ui_sessions_max,
            per_principal=settings.ui_sessions_per_principal,
            signins_per_minute=settings.ui_signins_per_minute,
        )

    def open(
        self, principal_id: str, token_digest: str, *, replacing: str | None = None
    ) -> tuple[str, WebSession]:
        """A new session; returns the id for the cookie (the hub keeps only its hash). The
        session ``replacing`` (the browser's previous one) ends with it, and so does the
        principal's own oldest when it already holds as many as it may. Raises RateLimited
        (nothing ended) when the principal signs in too often or the store is full."""
        now = self._clock()
        signins = self._check_rate(principal_id, now)
        if len(self._sessions) >= self._max_sessions:
            self.sweep()
        ending: list[tuple[str, EndReason]] = []
        replaced = _digest(replacing) if replacing else None
        if replaced is not None and replaced in self._sessions:
            ending.append((replaced, "replaced"))
        own = [k for k in self._of.get(principal_id, ()) if k != replaced]
        ending += [(k, "evicted") for k in own[: max(0, len(own) + 1 - self._per_principal)]]
        if len(self._sessions) - len(ending) >= self._max_sessions:
            wait = min((self._remaining(s, now) for s in self._sessions.values()), default=0.0)
            raise RateLimited(
                f"the hub holds {len(self._sessions):,} web UI sessions, as many as it may; no "
                f"other session is closed to make room for one of {principal_id!r}. Retry in "
                f"{wait:.0f} s, or ask the operator to raise PARLEY_UI_SESSIONS_MAX",
                code="ui_sessions_full",
                retry_after=round(max(wait, 1.0), 3),
                limit=self._max_sessions,
            )
        if signins is not None:
            signins.append(now)
        for key, reason in ending:
            self._end(key, reason)
        session_id = secrets.token_urlsafe(32)
        key = _digest(session_id)
        session = WebSession(
            key=key,
            principal_id=principal_id,
            token_digest=token_digest,
            csrf=secrets.token_urlsafe(32),
            created=now,
            last_seen=now,
        )
        self._sessions[key] = session
        self._of.setdefault(principal_id, {})[key] = None
        return session_id, session

    def _check_rate(self, principal_id: str, now: float) -> deque[float] | None:
        """The principal's sign-ins of the last minute (None without a limit); raises if one
        more would be too many."""
        limit = self._signins_per_minute
        if not limit:
            return None
        window = self._signins.setdefault(principal_id, deque())
        while window and window[0] <= now - SIGNIN_WINDOW_S:
            window.popleft()
        if len(window) >= limit:
            wait = window[0] + SIGNIN_WINDOW_S - now
            raise RateLimited(
                f"{principal_id!r} has signed in to the web UI {len(window)} times in the last "
                f"minute; the limit is {limit} a minute. Retry in {wait:.0f} s (the operator "
                "sets the limit with PARLEY_UI_SIGNINS_PER_MINUTE)",
                code="signin_rate_limited",
                retry_after=round(max(wait, 0.001), 3),
                limit=limit,
            )
        return window

    def find(self, session_id: str | None) -> WebSession | None:
        """The live session with this id, or None (unknown, idle too long, or too old)."""
        if not session_id:
            return None
        session = self._sessions.get(_digest(session_id))
        if session is None or not self.alive(session):
            return None
        session.last_seen = self._clock()
        return session

    def alive(self, session: WebSession) -> bool:
        """Whether the session still holds; one found expired ends here."""
        if self._sessions.get(session.key) is not session:
            return False
        if self._remaining(session, self._clock()) <= 0:
            self._end(session.key, "expired")
            return False
        return True

    def remaining(self, session: WebSession) -> float:
        """Seconds until the session expires, idle or old, unless it is used meanwhile."""
        return self._remaining(session, self._clock())

    def _remaining(self, session: WebSession, now: float) -> float:
        return min(session.last_seen + self._idle_s, session.created + self._max_s) - now

    def sweep(self) -> int:
        """End every expired session; returns how many."""
        now = self._clock()
        expired = [k for k, s in self._sessions.items() if self._remaining(s, now) <= 0]
        self._end_all(expired, "expired")
        return len(expired)

    def close(self, session_id: str | None, reason: EndReason = "signed_out") -> None:
        if session_id:
            key = _digest(session_id)
            if key in self._sessions:
                self._end(key, reason)

    def end_for_token(self, token_digest: str) -> int:
        """End every session signed in with this token (its token no longer holds)."""
        ended = [k for k, s in self._sessions.items() if s.token_digest == token_digest]
        self._end_all(ended, "revoked")
        return len(ended)

    def of(self, principal_id: str) -> list[WebSession]:
        """The principal's sessions, oldest first."""
        return [self._sessions[k] for k in self._of.get(principal_id, ())]

    def _end_all(self, keys: Iterable[str], reason: EndReason) -> None:
        for key in list(keys):
            self._end(key, reason)

    def _end(self, key: str, reason: EndReason) -> None:
        session = self._sessions.pop(key)
        own = self._of.get(session.principal_id)
        if own is not None:
            own.pop(key, None)
            if not own:
                del self._of[session.principal_id]
        if self.on_end is not None:
            self.on_end(session, reason)

    def issue_code(self, token_digest: str, ttl_s: float = CODE_TTL_S) -> str:
        """A single-use, short-lived code that signs a browser in as the token's principal:
        what a sign-in link carries instead of the token itself."""
        now = self._clock()
        self._codes = {k: c for k, c in self._codes.items() if c.expires > now}
        own = [k for k, c in self._codes.items() if c.token_digest == token_digest]
        if len(own) >= CODES_PER_TOKEN:
            self._codes.pop(own[0])
        elif len(self._codes) >= MAX_CODES:
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
