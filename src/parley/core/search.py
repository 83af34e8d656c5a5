"""Search over mail and channel messages: the query, what a hit shows, and the text rules.

The store matches words with its own full-text index (SQLite FTS5, PostgreSQL ``tsvector``);
the service narrows the matches to what the caller may read, by the same rules as a read: a
message its recipient, its sender (the original, not the recipients' copies) and the operator;
a channel message the channel's members, creator and owner, and the operator.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from parley.core.channels import CHANNEL_KINDS
from parley.core.clock import UtcTime
from parley.core.errors import InvalidRequest, UnknownKind
from parley.core.mail_kinds import MAIL_KINDS

SearchSource = Literal["mail", "channel"]
MAX_QUERY_CHARS = 200
MAX_TERMS = 12
SNIPPET_CHARS = 200

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class SearchQuery(BaseModel):
    """What to find: words (every one must occur), and filters."""

    text: str = ""
    source: SearchSource | None = None
    """Only mail, or only channel messages; both when None."""
    sender: str | None = None
    kind: str | None = None
    """A mail kind (task, report, ...) or a channel kind (group, discussion, ...)."""
    channel_id: str | None = None
    since: UtcTime | None = None
    until: UtcTime | None = None

    limit: int = Field(default=50, ge=1, le=200)


class SearchHit(BaseModel):
    """One message found: where it is, who wrote it, and a snippet of it."""

    source: SearchSource
    id: str
    sender_id: str
    created: datetime
    kind: str
    channel_id: str | None = None
    recipient_id: str | None = None
    subject: str = ""
    snippet: str = ""


def terms(text: str) -> list[str]:
    """The words of a query, as the indexes see words; punctuation never reaches the index's
    own query syntax (an FTS5 ``NEAR``, a ``tsquery`` operator), so no query can fail on it."""
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidRequest(
            f"the search text is {len(text)} characters; at most {MAX_QUERY_CHARS}",
            code="invalid_search",
        )
    words = _WORD.findall(text.lower())
    if len(words) > MAX_TERMS:
        raise InvalidRequest(
            f"the search names {len(words)} words; at most {MAX_TERMS}", code="invalid_search"
        )
    return words


def check_kind(kind: str | None) -> None:
    """Refuse a kind filter that is neither a mail kind nor a channel kind: it would match
    nothing, and an empty answer would read as "not found"."""
    known = (*MAIL_KINDS, *CHANNEL_KINDS)
    if kind is not None and kind not in known:
        raise UnknownKind(
            f"kind {kind!r} is neither a mail kind nor a channel kind; use one of "
            f"{', '.join(known)}",
            kind=kind,
            allowed=list(known),
        )


def snippet(text: str, words: list[str]) -> str:
    """About ``SNIPPET_CHARS`` of ``text`` around the first word found."""
    flat = " ".join(text.split())
    if len(flat) <= SNIPPET_CHARS:
        return flat
    lower = flat.lower()
    at = min((i for i in (lower.find(w) for w in words) if i >= 0), default=0)
    start = max(0, at - SNIPPET_CHARS // 4)
    cut = flat[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + cut + ("…" if start + SNIPPET_CHARS < len(flat) else "")
