"""The CLI's HTTP client: where the hub is, which token to use, and API errors as messages.

Every command but ``parley serve`` talks to a running hub over its REST API; none opens the store,
so the CLI behaves the same against a hub on this machine or elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parley.core.errors import ConfigError
from parley.home import DEFAULT_PORT, operator_token_path, read_hub_info, resolve_home

if TYPE_CHECKING:
    import httpx

# Full ids: anything else given for one is a name or the start of an id.
FULL_CHANNEL_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
FULL_WORKER_ID = re.compile(r"w-[0-9A-HJKMNP-TV-Z]{26}")
FULL_MEETING_ID = re.compile(r"mtg-[0-9A-HJKMNP-TV-Z]{26}")
FULL_SESSION_ID = re.compile(r"vs-[0-9A-HJKMNP-TV-Z]{26}")
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
TIMEOUT_S = 30.0
RECONNECT_ATTEMPTS = 10
# A pseudo event yielded each time a stream (re)connects: the hub has subscribed by then, so
# state looked up afterwards cannot change unseen.
STREAM_OPENED = "parley-stream-opened"


class CliFailure(Exception):
    """A failure the CLI reports as ``error [code]: message`` and exit status 1."""

    exit_code = 1

    def __init__(
        self, message: str, *, code: str = "cli_error", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details or {}


class ApiError(CliFailure):
    """The hub refused a request; ``code`` is the API's stable error code."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(message, code=code, details=details)
        self.status = status


class HubUnreachable(CliFailure):
    """Nothing answers at the configured URL."""


class InvalidUrl(CliFailure):
    """The hub URL given is not an http(s) URL: a usage error (exit status 2)."""

    exit_code = 2


def checked_url(url: str, source: str) -> str:
    """``url`` when it is an http(s) URL with a host, else an ``InvalidUrl`` naming ``source``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
        raise InvalidUrl(
            f"{url!r} (from {source}) is not a hub URL; give one such as http://127.0.0.1:8765",
            code="invalid_url",
        )
    return url


@dataclass(frozen=True)
class ClientConfig:
    """Where the hub is and who we are, with where each value came from."""

    home: Path
    url: str
    url_source: str
    token: str | None
    token_source: str | None


def resolve_url(explicit: str | None, home: Path) -> tuple[str, str]:
    """Base URL: ``--url`` > ``PARLEY_URL`` > ``<home>/hub.json`` > the default port."""
    if explicit:
        return explicit.rstrip("/"), "--url"
    env = os.environ.get("PARLEY_URL")
    if env:
        return env.rstrip("/"), "PARLEY_URL"
    try:
        info = read_hub_info(home)
    except ConfigError:
        info = {}
    url = info.get("url")
    if isinstance(url, str) and url:
        return url.rstrip("/"), str(home / "hub.json")
    return DEFAULT_URL, "default"


def resolve_token(explicit: str | None, home: Path) -> tuple[str | None, str | None]:
    """Token: ``--token`` > ``PARLEY_TOKEN`` > ``<home>/operator.token`` when readable."""
    if explicit:
        return explicit.strip(), "--token"
    env = os.environ.get("PARLEY_TOKEN")
    if env:
        return env.strip(), "PARLEY_TOKEN"
    path = operator_token_path(home)
    try:
        token = path.read_text().strip()
    except OSError:
        return None, None
    return (token, str(path)) if token else (None, None)


def resolve_config(
    *, home: str | os.PathLike[str] | None, url: str | None, token: str | None
) -> ClientConfig:
    root = resolve_home(home)
    base, url_source = resolve_url(url, root)
    checked_url(base, url_source)
    tok, token_source = resolve_token(token, root)
    return ClientConfig(root, base, url_source, tok, token_source)


@dataclass
class SseEvent:
    """One server-sent event."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    _lines: list[str] = field(default_factory=list, repr=False)

    def json(self) -> Any:
        return json.loads(self.data)


def parse_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Split a text/event-stream into events; comments (pings) are skipped."""
    current = SseEvent()
    for line in lines:
        if not line:
            if current._lines:
                current.data = "\n".join(current._lines)
                yield current
            current = SseEvent()
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            current._lines.append(value)
        elif name == "event":
            current.event = value
        elif name == "id":
            current.id = value


class HubClient:
    """A thin synchronous client of the hub's REST API."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        timeout: float = TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        # httpx is imported by the first command that talks to the hub, not by ``--help`` (Q7).
        import httpx

        self.config = config
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        self._http = httpx.Client(
            base_url=config.url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
    ) -> Any:
        """Send one request; return the decoded JSON body or raise a ``CliFailure``."""
        response = self.exchange(method, path, params=params, json_body=json_body)
        if not response.content:
            return None
        return response.json()

    def exchange(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
    ) -> httpx.Response:
        """Send one request; return the response (its status and headers too) or raise a
        ``CliFailure``."""
        import httpx

        # No params at all (not an empty mapping) keeps a query already in ``path``, e.g. a link.
        clean = {k: v for k, v in (params or {}).items() if v is not None} or None
        try:
            response = self._http.request(method, path, params=clean, json=json_body)
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from exc
        if response.status_code >= 400:
            raise self.api_error(response)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def probe(self, path: str) -> tuple[int, dict[str, Any]]:
        """GET a health endpoint: its status and JSON body whatever the status (a hub that is
        not ready answers 503 with why)."""
        import httpx

        try:
            response = self._http.get(path)
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def pages(self, path: str, **params: Any) -> Iterator[tuple[list[Any], bool]]:
        """Each page of a list and whether more follow it, following the hub's
        ``Link: <…>; rel="next"`` (a long list comes a page at a time)."""
        response = self.exchange("GET", path, params=params)
        while True:
            following = response.links.get("next")
            yield response.json(), following is not None
            if following is None:
                return
            response = self.exchange("GET", following["url"])

    def channel_id(self, ref: str | None) -> str | None:
        """A channel option's value (a name, an id or the start of one) as the channel's full
        id."""
        return self._full_id("/v1/channels/", FULL_CHANNEL_ID, ref)

    def worker_id(self, ref: str | None) -> str | None:
        """A worker option's value (an id or the start of one) as the worker's full id."""
        return self._full_id("/v1/workers/", FULL_WORKER_ID, ref)

    def meeting_id(self, ref: str | None) -> str | None:
        """A meeting option's value (an id or the start of one) as the meeting's full id."""
        return self._full_id("/v1/rooms/meetings/", FULL_MEETING_ID, ref)

    def _full_id(self, place: str, full: re.Pattern[str], ref: str | None) -> str | None:
        """An option's reference looked up through the path of what it names, which takes a
        name or the start of an id as the full id: an unknown or ambiguous reference is refused
        as that path refuses it. (A query parameter takes only the full id.)"""
        if ref is None or full.fullmatch(ref):
            return ref
        from urllib.parse import quote

        found: dict[str, Any] = self.get(place + quote(ref, safe=""))
        return str(found["id"])

    def post(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.request("POST", path, params=params, json_body={} if body is None else body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, json_body=body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json_body=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def stream(
        self, path: str, *, params: Mapping[str, Any] | None = None, last_id: str | None = None
    ) -> Iterator[SseEvent]:
        """Follow an SSE stream, resuming with Last-Event-ID after a dropped connection.

        Yields a ``STREAM_OPENED`` pseudo event after each (re)connection."""
        import httpx

        attempts = 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            timeout = httpx.Timeout(TIMEOUT_S, read=None)
            try:
                with self._http.stream(
                    "GET", path, params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise self.api_error(response)
                    attempts = 0
                    yield SseEvent(event=STREAM_OPENED, id=last_id)
                    for event in parse_sse(response.iter_lines()):
                        if event.id:
                            last_id = event.id
                        yield event
            except httpx.TransportError as exc:
                attempts += 1
                if attempts > RECONNECT_ATTEMPTS:
                    raise self.unreachable(exc) from exc
                # The hub restarted or the network blinked: resume where we were.
                time.sleep(min(5.0, 0.5 * attempts))
                continue
            return

    def unreachable(self, exc: Exception) -> HubUnreachable:
        cfg = self.config
        where = f"{cfg.url} (from {cfg.url_source})"
        return HubUnreachable(
            f"no parley hub answers at {where}: {exc.__class__.__name__}. Start one with "
            "`parley serve` (it records its URL in the data root), or point the CLI at a "
            "running hub with --url or PARLEY_URL",
            code="hub_unreachable",
        )

    def api_error(self, response: httpx.Response) -> ApiError:
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and "code" in body:
            code = str(body["code"])
            message = str(body.get("message", ""))
            details = body.get("details") or {}
        else:
            code = f"http_{response.status_code}"
            message = response.text.strip()[:500] or response.reason_phrase
            details = {}
        if response.status_code == 401 and self.config.token is None:
            message += (
                f"; no token was given: pass --token, set PARLEY_TOKEN, or keep the operator "
                f"token in {operator_token_path(self.config.home)}"
            )
        return ApiError(response.status_code, code, message, details)
