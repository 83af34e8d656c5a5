"""``--log-format json``: one JSON object per log record, redacted like the text lines (P5, Q8)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from parley.surfaces.logs import JsonLines, RedactSecrets

TOKEN = "pt_" + "A1b2C3d4" * 5


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactSecrets())
    handler.setFormatter(JsonLines())
    logger = logging.getLogger("parley.test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, out
    finally:
        logger.removeHandler(handler)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_record_is_one_json_line_with_time_level_logger_message_and_extras(
    json_log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = json_log
    logger.info("turn %s took %d ms", "t-1", 12, extra={"agent": "alpha", "round": 2})
    (line,) = lines(out)
    assert line["level"] == "INFO"
    assert line["logger"] == "parley.test.json"
    assert line["message"] == "turn t-1 took 12 ms"
    assert (line["agent"], line["round"]) == ("alpha", 2)
    assert str(line["time"]).endswith("+00:00")


def test_secrets_are_redacted_in_message_extras_and_traceback(
    json_log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = json_log
    path = f"/v1/events/stream?token={TOKEN}"
    logger.info('%s - "GET %s HTTP/1.1" %d', "127.0.0.1:5", path, 200)
    logger.warning("calling", extra={"url": "http://svc:hunter2@h/v1", "headers": [TOKEN]})
    try:
        raise RuntimeError(f"refused Authorization: Bearer {TOKEN}")
    except RuntimeError:
        logger.exception("failed")
    text = out.getvalue()
    assert TOKEN not in text and "hunter2" not in text
    access, calling, failed = lines(out)
    assert "?token=***" in str(access["message"])
    assert calling["url"] == "http://***@h/v1"
    assert "RuntimeError" in str(failed["exc_info"])
