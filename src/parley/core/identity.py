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
    active: bool = True
    created: datetime
    # Who may add this agent to channels without an invitation (core/consent.py); "*" is anyone.
    accepts_channels_from: list[str] = Field(default_factory=list)

    @property
    def is_operator(self) -> bool:
        return self.role == "operator"

    @property
    def runtime_kind(self) -> str:
        return str(self.runtime.get("kind", "none"))


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
