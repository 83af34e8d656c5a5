"""What parley can store, checked before a request reaches a store, so that both stores refuse
the same input with the same error instead of PostgreSQL failing where SQLite accepts.

Text must be valid Unicode without NUL characters (PostgreSQL text cannot hold ``\\x00``, and a
lone surrogate cannot be encoded as UTF-8); JSON must have finite numbers (``NaN`` is not JSON)
and bounded nesting; positions must fit the stores' 32-bit sequence columns. Sizes are measured
in UTF-8 bytes of compact JSON, the same way wherever a limit applies (``json_bytes``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import pydantic_core
from pydantic import BeforeValidator

from parley.core.errors import InvalidRequest, TooLarge

MAX_SEQ = 2**31 - 1
MAX_JSON_DEPTH = 32
_PREVIEW = 60


def text_problem(value: str) -> str | None:
    """Why parley cannot store ``value``, or None if it can."""
    if "\x00" in value:
        return "contains a NUL character (\\x00)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode)"
    return None


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why parley cannot store the JSON value ``value``, or None if it can."""
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, float):
        return (
            None if math.isfinite(value) else f"has the number {value!r} (JSON numbers are finite)"
        )
    if isinstance(value, dict | list):
        if depth >= MAX_JSON_DEPTH:
            return f"is nested deeper than {MAX_JSON_DEPTH} levels"
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in pairs:
            problem = (text_problem(key) if isinstance(key, str) else None) or json_problem(
                item, depth + 1
            )
            if problem is not None:
                return problem
    return None


def json_bytes(value: Any) -> int:
    """The size of ``value`` (JSON data or a model) as compact UTF-8 JSON: the one measure of
    every size limit. Every send pays for it: pydantic-core's encoder costs a fifth of the
    standard library's (bench/mail.py)."""
    return len(pydantic_core.to_json(value))


def check_size(size: int, limit: int, what: str, *, code: str) -> int:
    """Refuse ``what`` if its ``size`` in bytes is over ``limit``; returns the size."""
    if size > limit:
        raise TooLarge(
            f"{what} is {size:,} bytes; the limit is {limit:,} bytes. Send less: put big content "
            "in a file and send its path",
            code=code,
            limit=limit,
            size=size,
        )
    return size


def preview(value: str) -> str:
    """A short quotable form of ``value`` for messages."""
    return repr(value if len(value) <= _PREVIEW else value[:_PREVIEW] + "…")


def check_text(value: str, what: str) -> str:
    """Refuse text parley cannot store, naming the field it came in."""
    problem = text_problem(value)
    if problem is not None:
        raise InvalidRequest(
            f"{what} {preview(value)} {problem}; parley accepts no such text, remove it and retry",
            code="invalid_text",
            field=what,
        )
    return value


def check_length(value: str, what: str, limit: int) -> str:
    """Refuse text longer than its field allows, with the code the API's schemas give for it
    (``validation_error``), so that every surface refuses it the same way."""
    if len(value) > limit:
        raise InvalidRequest(
            f"{what} has {len(value):,} characters; the limit is {limit:,}",
            code="validation_error",
            field=what,
            limit=limit,
        )
    return value


def check_seq(value: int | None, what: str) -> int | None:
    """Refuse a stream position no store can hold (they are 32-bit)."""
    if value is not None and not 0 <= value <= MAX_SEQ:
        raise InvalidRequest(
            f"{what} {value!r} is not a position; use a number from 0 to {MAX_SEQ}",
            code="invalid_seq",
            field=what,
        )
    return value


# Before-validators, so that a field's own constraints (max_length…) keep their usual messages;
# a value of the wrong type is left to the field's type to refuse.
def _storable_text(value: Any) -> Any:
    problem = text_problem(value) if isinstance(value, str) else None
    if problem is not None:
        raise ValueError(f"the text {problem}; parley cannot store that, remove it")
    return value


def _storable_object(value: Any) -> Any:
    problem = json_problem(value) if isinstance(value, dict) else None
    if problem is not None:
        raise ValueError(f"the JSON {problem}; parley cannot store that, remove it")
    return value


StorableText = Annotated[str, BeforeValidator(_storable_text)]
"""A ``str`` field of a request model that refuses text no store can hold."""

OptionalStorableText = Annotated[str | None, BeforeValidator(_storable_text)]
"""An optional ``StorableText`` (so that ``max_length`` on the field keeps its usual message)."""

StorableObject = Annotated[dict[str, Any], BeforeValidator(_storable_object)]
"""A free-form JSON object field of a request model (a mail payload, a runtime config)."""
