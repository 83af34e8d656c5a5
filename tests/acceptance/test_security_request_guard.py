"""A real ``parley serve`` refuses what it must before reading a request body: a caller without a
valid token (401), a body over the size limit (413, declared or chunked), a body that stalls
(408). Raw sockets, so the test controls exactly which bytes reach the hub and when."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.acceptance.cli_support import ServedHub, served_hub

# A hang guard for each socket read, never an assertion on how fast the hub answered.
READ_TIMEOUT_S = 60.0
MAX_BYTES = 64 * 1024
BODY_TIMEOUT_S = 1


@pytest.fixture
def hub(
    tmp_path: Path, backend: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServedHub]:
    monkeypatch.setenv("PARLEY_REQUEST_MAX_BYTES", str(MAX_BYTES))
    monkeypatch.setenv("PARLEY_BODY_TIMEOUT_S", str(BODY_TIMEOUT_S))
    with served_hub(
        tmp_path / "home", database_url=database_url if backend == "postgres" else None
    ) as served:
        yield served


def connect(hub: ServedHub) -> socket.socket:
    parts = urlsplit(hub.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=READ_TIMEOUT_S)
    sock.settimeout(READ_TIMEOUT_S)
    return sock


def head(path: str, *lines: str) -> bytes:
    return (
        "\r\n".join([f"POST {path} HTTP/1.1", "Host: parley.test", *lines]) + "\r\n\r\n"
    ).encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], dict[str, object]]:
    """The status, headers and JSON body of the one response the hub sends."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the hub closed the connection without answering: {data!r}"
        data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the hub closed the connection in the middle of its answer"
        body += chunk
    return int(status_line.split()[1]), headers, json.loads(body[:length])


def test_an_unauthenticated_huge_body_is_refused_before_it_is_read(hub: ServedHub) -> None:
    for auth in ([], ["Authorization: Bearer pt_not-a-token"]):
        with connect(hub) as sock:
            # 300 MB announced, a few bytes sent: the 401 can only come if the hub did not
            # wait for the body.
            sock.sendall(
                head(
                    "/v1/mail", "Content-Type: application/json", "Content-Length: 300000000", *auth
                )
            )
            sock.sendall(b'{"to": "x"')
            status, headers, body = read_response(sock)
        assert status == 401
        assert body["code"] == ("invalid_token" if auth else "missing_token")
        assert headers["www-authenticate"].startswith("Bearer")


def test_mcp_refuses_a_bad_token_before_reading_the_body(hub: ServedHub) -> None:
    with connect(hub) as sock:
        sock.sendall(
            head(
                "/mcp",
                "Content-Type: application/json",
                "Accept: application/json, text/event-stream",
                f"Content-Length: {MAX_BYTES}",
                "Authorization: Bearer pt_not-a-token",
            )
        )
        sock.sendall(b'{"jsonrpc": "2.0"')
        status, headers, body = read_response(sock)
    assert status == 401
    assert body["code"] == "invalid_token"
    assert 'error="invalid_token"' in headers["www-authenticate"]


def test_a_declared_body_over_the_limit_is_refused_with_413(hub: ServedHub) -> None:
    with connect(hub) as sock:
        sock.sendall(
            head(
                "/v1/mail",
                f"Authorization: Bearer {hub.token}",
                "Content-Type: application/json",
                f"Content-Length: {MAX_BYTES + 1}",
            )
        )
        status, _, body = read_response(sock)
    assert status == 413
    assert body["code"] == "request_too_large"
    assert str(MAX_BYTES) in str(body["message"])


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(hub: ServedHub) -> None:
    with connect(hub) as sock:
        sock.sendall(
            head(
                "/v1/mail",
                f"Authorization: Bearer {hub.token}",
                "Content-Type: application/json",
                "Transfer-Encoding: chunked",
            )
        )
        chunk = b" " * 16384
        # Past the limit, then no end: the answer cannot wait for the whole body.
        for _ in range(MAX_BYTES // len(chunk) + 2):
            sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        status, _, body = read_response(sock)
    assert status == 413
    assert body["code"] == "request_too_large"


def test_a_body_that_stalls_is_refused_with_408(hub: ServedHub) -> None:
    with connect(hub) as sock:
        sock.sendall(
            head(
                "/v1/mail",
                f"Authorization: Bearer {hub.token}",
                "Content-Type: application/json",
                "Content-Length: 100",
            )
        )
        sock.sendall(b'{"to": "operator",')  # and then nothing more
        status, _, body = read_response(sock)
    assert status == 408
    assert body["code"] == "request_timeout"


def test_health_and_docs_need_no_token(hub: ServedHub) -> None:
    for path in ("/healthz", "/openapi.json"):
        with connect(hub) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: parley.test\r\n\r\n".encode())
            status, _, _ = read_response(sock)
        assert status == 200, path
