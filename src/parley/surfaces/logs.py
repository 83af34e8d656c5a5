"""Log lines without secrets: a filter that redacts every record before any handler writes it.

Installed by ``parley serve`` on the root logger's handlers and on uvicorn's, so neither the
hub's own lines nor a library's (an HTTP client logging a URL with userinfo) nor the access log
(a stream request's ``?token=``) carry a credential (Q8). With ``--log-format json`` every record
is one JSON object per line (:class:`JsonLines`), uvicorn's included.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from parley.core.redact import redact_text

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Every attribute a bare LogRecord has; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's coloured duplicate of the message
}


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


class JsonLines(logging.Formatter):
    """One JSON object per record: ``time`` (UTC ISO-8601), ``level``, ``logger``, ``message``,
    every ``extra=`` field, and ``exc_info`` with the traceback text when there is one.

    Extra fields are redacted here: the :class:`RedactSecrets` filter sees only the message and
    its arguments."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in line:
                line[key] = _json_value(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc_info"] = redact_text(record.exc_text)
        if record.stack_info:
            line["stack_info"] = redact_text(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return redact_text(value)
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        return redact_text(str(value))
    clean = redact_text(text)
    if clean == text:
        return value
    try:
        return json.loads(clean)
    except ValueError:
        return redact_text(str(value))


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """Send every record at ``level`` or above to stderr as text lines or JSON lines, redacted.

    In JSON mode uvicorn must be given ``log_config=None`` (:func:`uvicorn_log_config`), so that
    its loggers hand their records to this root handler instead of their own text handlers."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    install_redaction()


def uvicorn_log_config(log_format: LogFormat) -> dict[str, Any] | None:
    """uvicorn's own logging config for text lines, none for JSON lines (records propagate to
    the root handler that :func:`configure_logging` installed)."""
    if log_format == "json":
        return None
    from uvicorn.config import LOGGING_CONFIG

    return LOGGING_CONFIG
