"""The log filter ``parley serve`` installs: no line carries a token or a runtime secret (Q8)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from uvicorn.logging import AccessFormatter

from parley.surfaces.logs import RedactSecrets, install_redaction

TOKEN = "pt_" + "A1b2C3d4" * 5


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactSecrets())
    logger = logging.getLogger("parley.test.redaction")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, out, handler
    finally:
        logger.removeHandler(handler)


def test_access_log_line_keeps_its_shape_without_the_token(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, out, handler = captured
    handler.setFormatter(AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s'))
    path = f"/v1/events/stream?token={TOKEN}&last_id=1"
    logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", path, "1.1", 200)
    line = out.getvalue()
    assert TOKEN not in line
    assert '"GET /v1/events/stream?token=***&last_id=1 HTTP/1.1" 200' in line


def test_message_arguments_and_tracebacks_are_redacted(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, out, _ = captured

    class Config:
        def __repr__(self) -> str:
            return "Config(base_url='http://svc:hunter2@h/v1')"

    logger.warning("calling %s with %r, %d tries", "http://svc:hunter2@h/v1", Config(), 3)
    try:
        raise RuntimeError(f"refused Authorization: Bearer {TOKEN}")
    except RuntimeError:
        logger.exception("failed with api_key=%s", "sk-live-0123456789")
    text = out.getvalue()
    assert "hunter2" not in text and TOKEN not in text and "sk-live" not in text
    assert "calling http://***@h/v1 with Config(base_url='http://***@h/v1'), 3 tries" in text
    assert "RuntimeError: refused Authorization: ***" in text


def test_install_covers_root_and_uvicorn_handlers_once() -> None:
    root_handler = logging.StreamHandler(io.StringIO())
    access_handler = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(root_handler)
    logging.getLogger("uvicorn.access").addHandler(access_handler)
    try:
        first = install_redaction()
        again = install_redaction()
        assert first is again
        for handler in (root_handler, access_handler):
            assert [f for f in handler.filters if isinstance(f, RedactSecrets)] == [first]
    finally:
        logging.getLogger().removeHandler(root_handler)
        logging.getLogger("uvicorn.access").removeHandler(access_handler)
        for handler in (root_handler, access_handler):
            handler.removeFilter(first)
