"""Text that others wrote, inside the blocks the hub writes around it for a model to read.

The hub wraps mail bodies, briefs, minutes, task results, a discussion's guide and a takeover's
instruction in texts of its own: the ``<pending_mail>`` block, the ``[TAKEOVER]`` and
``[RESUME]`` envelopes, ``[TASK RESULT]``, the meeting prompts. A sender must not be able to
end such a block or write a line that reads as the hub's. The rule here makes that a property of
lines: every line the hub writes starts with something other than ``>``, and every line of
quoted text starts with ``>``. So quoted text can never produce a line of the hub's: not a
closing marker (``</pending_mail>``), not an envelope (``[TAKEOVER] operator …``), not an
attribution. Who sent it, of what kind, under which subject is the hub's own line above the
quote, never read from inside it; a value on such a line is a :func:`label` or an
:func:`inline` string, which cannot leave that line.

Why ``> `` quoting, and not escaping the block's tags, a random fence or JSON: escaping has to
know every marker a model may take for the hub's (tags, but also ``[TAKEOVER]``, headings,
attribution lines), and misses the next one; a random fence is unforgeable only with high
probability and means nothing to a model; JSON turns every line break of a long mail into
``\\n``. ``> `` is the e-mail convention models read as "someone else wrote this", it keeps the
text as written (nested quotes read as ``> >``), and its guarantee is a line-level invariant
that a test checks for any input.

A *line* is what :meth:`str.splitlines` splits on: ``\\n``, ``\\r``, ``\\v``, ``\\f``,
``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028`` and ``\\u2029``, the widest notion a model or a
renderer may apply. Quoted text keeps none of them but the ``\\n`` the hub joins lines with.
"""

from __future__ import annotations

import json
import re
from typing import Any

QUOTE_MARK = ">"
ELLIPSIS = "…"
# Line breaks that ``json.dumps(..., ensure_ascii=False)`` leaves as they are.
_RAW_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
# A plain word, or words joined by " / " (a worker's session name: "audit / probe-the-parser").
_WORD = r"[\w.@:/+~…-]+"
_PLAIN_LABEL = re.compile(rf"{_WORD}(?: / {_WORD})*")


def quote(text: str, *, limit: int | None = None) -> str:
    """``text`` as quoted lines: ``> `` before each line (``>`` alone for an empty one), the
    lines joined with ``\\n``. Over ``limit`` characters it is cut and ends with ``…``. Empty
    text is one ``>`` line, so a quote is never empty."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + ELLIPSIS
    return "\n".join(f"{QUOTE_MARK} {line}" if line else QUOTE_MARK for line in lines_of(text))


def lines_of(text: str) -> list[str]:
    """The lines of ``text`` by every line break :meth:`str.splitlines` knows; at least one."""
    return text.splitlines() or [""]


def flat(text: str) -> str:
    """``text`` on one line: each line break (any of them) becomes a space."""
    return " ".join(part.strip() for part in lines_of(text) if part.strip())


def inline(text: str, *, limit: int | None = None) -> str:
    """``text`` as one JSON string literal, for a free text on a line of the hub's (a subject,
    a topic): in double quotes, with every line break and quote inside escaped, so it can end
    neither its quotes nor its line. Over ``limit`` characters it is cut and ends with ``…``."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + ELLIPSIS
    return json_line(text)


def label(text: str) -> str:
    """A name, id or path on a line of the hub's: as it is when it is plain (words of letters,
    digits and ``._@:/+~…-``, or such words joined by `` / ``), else :func:`inline`. Either
    way it cannot leave its line, and a bare label holds no quote that could blur its end."""
    return text if _PLAIN_LABEL.fullmatch(text) else inline(text)


def json_line(value: Any) -> str:
    """``value`` as compact JSON on one line: no line break of any kind stays raw (JSON escapes
    the ASCII ones; the three Unicode ones are escaped here), so quoted JSON cannot end the
    fence around it."""
    text = json.dumps(value, ensure_ascii=False)
    for raw, escaped in _RAW_BREAKS.items():
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def attributed(head: str, text: str, *, limit: int | None = None) -> str:
    """The hub's ``head`` line (who wrote it, what it is), then ``text`` quoted under it."""
    return f"{head}\n{quote(text, limit=limit)}"


def hub_lines(text: str) -> list[str]:
    """The lines of ``text`` that are not quoted: those a reader takes for the hub's own."""
    return [line for line in lines_of(text) if not line.startswith(QUOTE_MARK)]
