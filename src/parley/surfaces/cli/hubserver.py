"""Run a started hub under uvicorn for ``parley serve``.

The hub is started before the server listens, so a refusal to start (another hub holds this
SQLite data root, an unknown schema, an unreachable database) is one plain error line and exit
status 1 instead of an ASGI lifespan traceback. Imported only by ``parley serve``: the server
stack is not loaded for client commands.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import uvicorn
from rich.text import Text

from parley.bootstrap import build_discord_bridge, build_hub
from parley.config import Settings, operator_token_path, write_hub_info, write_operator_token
from parley.core.errors import ParleyError, StorageError, StorageFull
from parley.heap import settle_heap
from parley.service.hub import Hub
from parley.surfaces.cli.output import console, print_error
from parley.surfaces.logs import install_redaction, uvicorn_log_config
from parley.surfaces.rest.app import create_app

if TYPE_CHECKING:
    from parley.service.bridge.bridge import Bridge

HEADER_MAX_BYTES = 16 * 1024
"""The request line and headers together; parley's clients send a few hundred bytes."""
KEEP_ALIVE_S = 5
"""How long an idle connection stays open between requests."""


def serving_options(settings: Settings) -> dict[str, Any]:
    """How uvicorn serves the hub (the benchmarks serve their reference apps the same way)."""
    return {
        "timeout_graceful_shutdown": 5,
        # h11, not httptools: httptools buffers a header of any size, h11 refuses one larger
        # than this with 400, so a client cannot grow the hub before it is authenticated.
        # uvicorn cannot bound how slowly headers arrive: in production a reverse proxy does
        # (docs/security.md).
        "http": "h11",
        "h11_max_incomplete_event_size": HEADER_MAX_BYTES,
        "timeout_keep_alive": KEEP_ALIVE_S,
        "limit_concurrency": settings.max_connections,
    }


def client_url(host: str, port: int) -> str:
    """The URL a client on this machine uses; a wildcard bind is reached over loopback."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def describe_database(settings: Settings) -> str:
    url = settings.resolved_database_url()
    if url.startswith("sqlite:///"):
        return f"SQLite {url[len('sqlite:///') :]}"
    parts = urlsplit(url)
    where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"
    return f"PostgreSQL {where}"


def file_error(exc: OSError) -> StorageError:
    """A file the hub could not write at start (``hub.json``, the operator token, the data
    root itself) as a refusal with a code, instead of a traceback."""
    path = str(exc.filename or "the data root")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(
            f"could not write {path!r}: the disk holding it is full ({exc.strerror}); "
            "free space there and start the hub again",
            path=path,
        )
    return StorageError(
        f"could not write {path!r}: {exc.strerror}; the data root must be writable by the "
        "user running the hub (choose another with --home or PARLEY_HOME)",
        code="data_root_unwritable",
        path=path,
    )


class HubServer(uvicorn.Server):
    """A uvicorn server that announces the hub once it listens."""

    def __init__(
        self, config: uvicorn.Config, hub: Hub, settings: Settings, *, first_start: bool
    ) -> None:
        super().__init__(config)
        self.hub = hub
        self.settings = settings
        self.first_start = first_start
        # Why the hub stopped serving as soon as it started, if it did.
        self.failure: ParleyError | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            try:
                self.announce()
            except OSError as exc:
                # Without hub.json no client on this machine finds the hub: stop at once.
                self.failure = file_error(exc)
                self.should_exit = True

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises a caught signal after serving, which would kill the process before
        # the hub closes its store; the shutdown it asked for is already under way.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()

    def bound_port(self) -> int:
        for server in getattr(self, "servers", []):
            for sock in server.sockets or ():
                return int(sock.getsockname()[1])
        return self.config.port

    def announce(self) -> None:
        settings = self.settings
        home = settings.data_root()
        url = client_url(self.config.host, self.bound_port())
        # Command agents' turns reach the hub here (their CLIs run on this machine).
        self.hub.identity.turn_access.mcp_url = f"{url}/mcp"
        write_hub_info(home, url)
        token_path = operator_token_path(home)
        if self.first_start:
            token = (str(token_path), "created on this first start; it is never shown again")
        elif token_path.exists():
            token = (str(token_path), "")
        else:
            token = (
                f"not in {token_path}",
                "it was written on the first start of this database; copy it here or use "
                "--token/PARLEY_TOKEN",
            )
        # (what, value, a note on a line of its own): a value is printed whole (a path or a URL
        # is copied from here), and notes are kept off its line so the banner reads at 80
        # columns.
        rows = [
            ("data root", str(home), ""),
            ("database", describe_database(settings), ""),
            ("operator token", *token),
            ("web UI", f"{url}/ui/", "sign in with a token, or run `parley ui` for a link"),
            ("API docs", f"{url}/docs", ""),
        ]
        console.print(Text(f"parley hub running at {url}", style="bold green"), soft_wrap=True)
        for key, value, note in rows:
            console.print(Text(f"  {key:<15} {value}"), soft_wrap=True)
            if note:
                console.print(Text(f"  {'':<15} ({note})", style="dim"))
        console.print(Text("Press Ctrl+C to stop.", style="dim"))
        console.file.flush()


async def run_hub(settings: Settings, log_level: str, *, discord: bool = False) -> int:
    """Start the hub, serve it until a signal, stop it. Returns the exit status. Logging is
    configured, redaction included, by ``parley serve`` before this runs. The Discord bridge
    runs when asked (``--discord``) or configured, and is not imported otherwise."""
    bridge: Bridge | None = None
    hub: Hub | None = None
    try:
        hub = build_hub(settings)
        await hub.start()
    except (ParleyError, OSError) as exc:
        refusal = file_error(exc) if isinstance(exc, OSError) else exc
        print_error(refusal.code, refusal.message)
        if hub is not None:
            with contextlib.suppress(Exception):
                await hub.stop()
        return 1
    if discord or settings.discord_configured:
        try:
            bridge = build_discord_bridge(hub, settings)
            await bridge.start()
        except ParleyError as exc:
            print_error(exc.code, exc.message)
            await hub.stop()
            return 1
    settle_heap()
    try:
        home = settings.data_root()
        first_start = hub.operator_token is not None
        if hub.operator_token is not None:
            try:
                write_operator_token(home, hub.operator_token)
            except OSError as exc:
                refusal = file_error(exc)
                print_error(refusal.code, refusal.message)
                return 1
        config = uvicorn.Config(
            create_app(settings, hub=hub),
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            log_config=uvicorn_log_config(settings.log_format),
            access_log=log_level in ("info", "debug"),
            **serving_options(settings),
        )
        # Again now that uvicorn has configured its loggers: the access log shows ?token=.
        install_redaction()
        server = HubServer(config, hub, settings, first_start=first_start)
        try:
            await server.serve()
        except SystemExit:
            if server.started:
                raise
            print_error(
                "listen_failed",
                f"could not listen on {settings.host}:{settings.port} (see the message above); "
                "choose another port with --port or PARLEY_PORT",
            )
            return 1
        if server.failure is not None:
            print_error(server.failure.code, server.failure.message)
            return 1
    finally:
        if bridge is not None:
            await bridge.close()
        await hub.stop()
    return 0
