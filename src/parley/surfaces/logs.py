"""Log lines without secrets: a filter that redacts every record before any handler writes it.

Installed by ``parley serve`` on the root logger's handlers and on uvicorn's, so neither the
hub's own lines nor a library's (an HTTP client logging a URL with userinfo) nor the access log
(a stream request's ``?token=``) carry a credential (Q8).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from parley.core.redact import redact_text

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


class _Redacted:
    """An argument whose text held a secret: formats as its redacted ``str`` and ``repr``."""

    def __init__(self, text: str, representation: str) -> None:
        self._text = text
        self._representation = representation

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return self._representation


def _redact_arg(arg: Any) -> Any:
    if arg is None or isinstance(arg, bool | int | float):
        return arg
    if isinstance(arg, str):
        return redact_text(arg)
    text, representation = str(arg), repr(arg)
    clean_text, clean_repr = redact_text(text), redact_text(representation)
    if clean_text == text and clean_repr == representation:
        return arg
    return _Redacted(clean_text, clean_repr)


class RedactSecrets(logging.Filter):
    """Redacts credentials from a record's message, arguments and traceback text in place.

    The arguments are redacted one by one and stay arguments, so formatters that read them
    (uvicorn's access formatter unpacks its five) keep working; only a message whose secret
    shows once formatted is replaced by its redacted text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, Mapping):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        try:
            message = record.getMessage()
        except Exception:
            # A malformed call; logging reports it, from what we redact here.
            record.msg = _redact_arg(record.msg)
        else:
            clean = redact_text(message)
            if clean != message:
                # The secret shows only once formatted ("api_key=%s"): keep the text alone.
                record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            # Formatters reuse exc_text when it is set, so the traceback is printed redacted.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


def install_redaction(loggers: Iterable[str] = UVICORN_LOGGERS) -> RedactSecrets:
    """Put one :class:`RedactSecrets` on every handler of the root logger and of ``loggers``
    (records reach a handler whichever logger they were made by); safe to call again."""
    redact = next(
        (f for h in _handlers(loggers) for f in h.filters if isinstance(f, RedactSecrets)),
        RedactSecrets(),
    )
    for handler in _handlers(loggers):
        if redact not in handler.filters:
            handler.addFilter(redact)
    return redact


def _handlers(loggers: Iterable[str]) -> list[logging.Handler]:
    found: list[logging.Handler] = list(logging.getLogger().handlers)
    for name in loggers:
        found += [h for h in logging.getLogger(name).handlers if h not in found]
    return found
