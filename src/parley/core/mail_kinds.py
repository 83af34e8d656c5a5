"""The kinds of mail (M2) and the default time to live, without pydantic.

Kept apart from :mod:`parley.core.mail` so that the CLI can show them without importing pydantic:
each CLI call pays its imports (Q7).
"""

from __future__ import annotations

from typing import Literal, get_args

MailroomKind = Literal["task", "report", "handoff", "blocker", "notice"]
SessionKind = Literal[
    "task-dispatch",
    "task-result",
    "cancel",
    "takeover",
    "context-inject",
    "status-update",
    "info",
]
# Mailroom kinds, session kinds, and the minutes a meeting mails to its convener.
MailKind = Literal[MailroomKind, SessionKind, "minutes"]
MAIL_KINDS: tuple[str, ...] = get_args(MailKind)

DEFAULT_TTL_SECONDS = 86400
