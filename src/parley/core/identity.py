"""Principals: agents and humans, each with a bearer token; the operator is a human with the
operator role. The server derives who is speaking from the token, never from the request body."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from parley.core.errors import InvalidRequest

PrincipalKind = Literal["agent", "human"]
Role = Literal["member", "operator"]
OPERATOR_ID = "operator"
MODERATOR_ID = "moderator"
SYSTEM_ID = "system"
RESERVED_IDS = frozenset({OPERATOR_ID, MODERATOR_ID, SYSTEM_ID, "all", "*", "ceo"})

_SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class Principal(BaseModel):
    """An agent or a human known to the hub."""

    id: str
    kind: PrincipalKind
    role: Role = "member"
    display_name: str
    workspace: str | None = None
    persona: str = ""
    runtime: dict[str, Any] = Field(default_factory=dict)
    work_channel_id: str | None = None
    # False once archived: listed nowhere, its tokens refused; its id stays taken.
    active: bool = True
    # A disabled agent is given no turns; its mail waits in its inbox.
    disabled: bool = False
    created: datetime
    # Who may add this agent to channels without an invitation (core/consent.py); "*" is anyone.
    accepts_channels_from: list[str] = Field(default_factory=list)

    @property
    def is_operator(self) -> bool:
        return self.role == "operator"

    @property
    def state(self) -> str:
        """``active``, ``disabled`` or ``archived``."""
        if not self.active:
            return "archived"
        return "disabled" if self.disabled else "active"

    @property
    def takes_turns(self) -> bool:
        """Whether the hub may give this principal turns (an archived or disabled one not)."""
        return self.active and not self.disabled

    @property
    def runtime_kind(self) -> str:
        return str(self.runtime.get("kind", "none"))


TOKEN_ID_CHARS = 12
"""A token's public id: this many leading hex digits of its hash (never the token itself)."""


class TokenRecord(BaseModel):
    """A stored token as the hub keeps it: its hash, never the secret."""

    hash: str
    label: str
    created: datetime
    last_used: datetime | None = None

    @property
    def id(self) -> str:
        return self.hash[:TOKEN_ID_CHARS]


def validate_slug(value: str, *, what: str = "id") -> str:
    """Check an id slug: lowercase letters, digits, '.', '_' and '-', at most 63 characters."""
    if not _SLUG.match(value):
        raise InvalidRequest(
            f"{what} {value!r} is not a valid slug; use lowercase letters, digits, '.', '_' or "
            "'-', starting with a letter or digit, at most 63 characters",
            code="invalid_slug",
            field=what,
        )
    if value in RESERVED_IDS:
        raise InvalidRequest(
            f"{what} {value!r} is reserved; choose another", code="reserved_id", field=what
        )
    return value


def new_token() -> str:
    """A fresh bearer token; shown once, stored only as its hash."""
    return "pt_" + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
