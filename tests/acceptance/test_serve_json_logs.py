"""``parley serve --log-format json`` (or ``PARLEY_LOG_FORMAT=json``): every log line, uvicorn's
access and server lines included, is one JSON object, and a token in a URL is still redacted."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.acceptance.cli_support import LAST_LINE, READY_LINE, spawn_hub, wait_ready

READ_S = 30.0


@pytest.mark.parametrize("how", ["option", "env"])
def test_every_log_line_is_json_and_redacted(
    tmp_path: Path, backend: str, database_url: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "env":
        monkeypatch.setenv("PARLEY_LOG_FORMAT", "json")
    hub = spawn_hub(
        tmp_path / "home",
        database_url=database_url if backend == "postgres" else None,
        extra_args=["--log-level", "info"] + (["--log-format", "json"] if how == "option" else []),
    )
    try:
        wait_ready(hub)
        token = hub.token
        with httpx.Client(base_url=hub.url, timeout=READ_S) as client:
            refused = client.get("/v1/events", params={"token": token})
            assert refused.status_code == 401  # ?token= is for the event streams only
        hub.output.wait_for(lambda line: "GET /v1/events?token=*** HTTP" in line, READ_S)
    finally:
        hub.stop()
    output = hub.output.until_end(READ_S)
    assert token not in output
    # stdout carries the announcement for people; every other line is a log record.
    announcement = {line for line in output.splitlines() if line.startswith(("parley hub", "  "))}
    records = [
        json.loads(line)
        for line in output.splitlines()
        if line and line not in announcement and line != LAST_LINE
    ]
    assert READY_LINE.search(output) is not None
    loggers = {r["logger"] for r in records}
    assert {"uvicorn.access", "uvicorn.error"} <= loggers
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    access = [r["message"] for r in records if r["logger"] == "uvicorn.access"]
    assert any('"GET /v1/events?token=*** HTTP/1.1" 401' in m for m in access), access
