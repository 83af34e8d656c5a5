"""Who may put an agent in a channel. A member of a group or discussion is given turns, and a turn
runs the agent's runtime, which may be a paid model: so an agent joins a channel only when the
operator adds it, it adds itself, or it consents: the adder is on its allow-list
(``accepts_channels_from``), or it accepts an invitation. Agents consent to nobody by default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from parley.core.errors import InvalidRequest, PermissionDenied
from parley.core.identity import Principal

ANYONE = "*"
MAX_ALLOWED = 200
_ENTRY = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")

InvitationStatus = Literal["pending", "accepted", "declined"]


class Invitation(BaseModel):
    """An invitation of an agent into a channel by one of its members; the agent joins only when
    it accepts."""

    id: str
    channel_id: str
    agent_id: str
    invited_by: str
    status: InvitationStatus = "pending"
    created: datetime
    decided: datetime | None = None


def check_allow_list(entries: Iterable[str]) -> list[str]:
    """An allow-list of principal ids (or ``*`` for anyone), deduplicated in order."""
    out: dict[str, None] = {}
    for raw in entries:
        entry = raw.strip()
        if entry != ANYONE and not _ENTRY.match(entry):
            raise InvalidRequest(
                f"accepts_channels_from entry {raw!r} is not a principal id or '*'; list the ids "
                "of agents and humans who may add this agent to channels, or '*' for anyone",
                code="invalid_consent_entry",
            )
        out.setdefault(entry, None)
    if len(out) > MAX_ALLOWED:
        raise InvalidRequest(
            f"accepts_channels_from has {len(out)} entries; the limit is {MAX_ALLOWED} (use '*' "
            "to accept anyone)",
            code="invalid_consent_entry",
        )
    return list(out)


def may_add(adder: Principal, member: Principal) -> bool:
    """Whether ``adder`` may put ``member`` in a channel without an invitation. Only agents need
    consent: they are the ones whose runtimes a channel drives."""
    if adder.is_operator or adder.id == member.id or member.kind != "agent":
        return True
    allowed = member.accepts_channels_from
    return ANYONE in allowed or adder.id in allowed


def refuse_unconsented(adder: Principal, missing: list[str]) -> None:
    """Refuse a channel change that would add agents who have not consented to ``adder``."""
    if not missing:
        return
    names = ", ".join(repr(m) for m in missing)
    raise PermissionDenied(
        f"{names} {'has' if len(missing) == 1 else 'have'} not consented to be added to channels "
        f"by {adder.id!r}; create the channel without them and invite them (`parley channel "
        "invite <channel> <agent>`, the invite_to_channel tool, or POST "
        "/v1/channels/{id}/invitations): each joins when it accepts. Or ask the operator to "
        f"put {adder.id!r} on their accepts_channels_from (`parley agent consent <agent> "
        f"--accept-channels-from {adder.id}`).",
        code="membership_consent_required",
        agents=missing,
    )
