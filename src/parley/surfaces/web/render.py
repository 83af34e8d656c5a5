"""Templates, and the small helpers every page and action uses."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from pydantic import ValidationError

from parley.core.errors import ParleyError, RateLimited
from parley.surfaces.web.auth import PREFIX, Viewer

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")

# Why a task ended, in words. Only "unanimous" is a conclusion; every other reason says the
# discussion stopped without one (C7: "ended: max_rounds" is never shown as "concluded").
END_WORDS = {
    "unanimous": "concluded: every member agreed",
    "max_rounds": "ended: max_rounds (no agreement within the rounds)",
    "dormant": "ended: dormant (nobody spoke)",
    "idle": "ended: idle",
    "superseded": "ended: superseded by a newer message",
    "cancelled": "ended: cancelled",
    "failed": "ended: failed",
    "closed": "ended: closed",
    "replied": "ended: replied",
    "interrupted": "ended: interrupted (the hub stopped)",
    "deleted": "ended: the channel was deleted",
}


def end_words(reason: str | None) -> str:
    if reason is None:
        return "ended: reason unknown"
    return END_WORDS.get(reason, f"ended: {reason}")


def when(value: datetime | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


GENERATED_ID = re.compile(r"(?:[a-z]+-)?[0-9A-HJKMNP-TV-Z]{26}")
"""An id the hub made (a ULID, with a prefix such as a worker's ``w-``), not a name."""


def short_id(value: str | None) -> Markup:
    """A generated id by its last six characters, whole in its tooltip; a name as it is."""
    if not value:
        return Markup("")
    if GENERATED_ID.fullmatch(value) is None:
        return escape(value)
    return Markup('<code title="{0}">…{1}</code>').format(value, value[-6:])


templates.env.filters["when"] = when
templates.env.filters["short_id"] = short_id
templates.env.filters["age"] = age
templates.env.globals["end_words"] = end_words
templates.env.globals["prefix"] = PREFIX


SECURITY_HEADERS = {
    # Scripts, styles and connections from the hub alone (htmx is vendored; no inline script),
    # forms post only to it, and no other site may frame a page (clickjacking).
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # A Referer only to the hub itself (the origin check's fallback), never a /ui URL to others.
    "Referrer-Policy": "same-origin",
    # Pages hold what one principal may see: no cache keeps them for the next user.
    "Cache-Control": "no-store",
}


def html(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """A template rendered with the UI's security headers."""
    return templates.TemplateResponse(
        request, name, context, status_code=status_code, headers=SECURITY_HEADERS
    )


def page(
    request: Request, viewer: Viewer, name: str, status_code: int = 200, **context: Any
) -> HTMLResponse:
    """A full page for the viewer; the flash messages of its session are shown once."""
    flash = list(viewer.session.flash)
    viewer.session.flash.clear()
    return html(
        request,
        name,
        {"viewer": viewer.principal, "csrf": viewer.session.csrf, "flash": flash, **context},
        status_code,
    )


def retry_after(exc: RateLimited) -> str:
    """The Retry-After header of a refusal: whole seconds, at least one (as the API says)."""
    return str(max(1, int(exc.retry_after + 0.999)))


def fragment(name: str, **context: Any) -> str:
    """A piece of a page (an SSE event's data)."""
    return templates.get_template(name).render(**context)


OLDER_PAGE = 100
"""Messages a transcript loads at once when the reader scrolls up past its first."""
OLDER_TRIES = 10


async def older_messages(
    read: Callable[[int, int], Awaitable[list[Any]]], before: int
) -> HTMLResponse:
    """The messages before seq ``before``, at most a page, as transcript items (oldest first);
    ``X-Parley-Older: 1`` when still older ones remain. ``read(after_seq, limit)`` reads as the
    viewer. Seqs count from 1 in each channel."""
    rows: list[Any] = []
    start = max(0, before - 1)
    for _ in range(OLDER_TRIES):  # a few pages back across a gap in the seqs, no more
        if start <= 0 or rows:
            break
        low = max(0, start - OLDER_PAGE)
        rows = [m for m in await read(low, OLDER_PAGE) if m.seq < before]
        start = low
    body = "".join(fragment("_message.html", m=m) for m in rows)
    headers = {**SECURITY_HEADERS, "X-Parley-Older": "1" if start > 0 else "0"}
    return HTMLResponse(body, headers=headers)


def back(path: str) -> RedirectResponse:
    """After an action: see the page again (POST → redirect → GET)."""
    return RedirectResponse(path, status_code=303)


def _invalid(exc: ValidationError) -> str:
    # The code REST gives a request its schema refuses: one refusal, one code, on every surface.
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first.get("loc", ())) or "the form"
    return f"Refused (validation_error): {field}: {first.get('msg', 'invalid value')}"


async def attempt(
    viewer: Viewer,
    action: Callable[[], Awaitable[Any]],
    done: str,
    where: str,
    *,
    then: Callable[[Any], str] | None = None,
) -> RedirectResponse:
    """Run an action through the service layer as the viewer and go back to ``where`` (or, on
    success, to ``then(result)``). What the service or a request model refuses is shown on the
    next page with its code and message, never swallowed."""
    try:
        result = await action()
    except ParleyError as exc:
        viewer.session.say("error", f"Refused ({exc.code}): {exc.message}")
        return back(where)
    except ValidationError as exc:
        viewer.session.say("error", _invalid(exc))
        return back(where)
    viewer.session.say("ok", done)
    return back(then(result) if then is not None else where)
