"""The composition root: build a Hub from settings with the right adapters."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parley.adapters.bus.memory import MemoryBus
from parley.adapters.store.sql_store import SqlStore
from parley.adapters.store.sqlite import SqliteStore
from parley.adapters.workspace import LocalWorkspace
from parley.config import Settings, write_operator_token
from parley.core.errors import ConfigError
from parley.core.ports import Bus, Clock, ProcessKeeper, RuntimeSource, Store
from parley.private_files import secure_data_root
from parley.service.hub import Hub

if TYPE_CHECKING:
    from parley.service.bridge.bridge import Bridge

log = logging.getLogger("parley.hub")


def build_store(settings: Settings) -> Store:
    url = settings.resolved_database_url()
    if url.startswith("sqlite:///"):
        if settings.db_schema is not None:
            raise ConfigError(
                f"PARLEY_DB_SCHEMA={settings.db_schema!r} names a PostgreSQL schema, and the "
                "database is SQLite; unset it, or use PostgreSQL",
                code="invalid_config",
            )
        return SqliteStore(Path(url[len("sqlite:///") :]), synchronous=settings.sqlite_synchronous)
    if url.startswith(("postgresql", "postgres://")):
        # Imported only for a PostgreSQL URL: its dialect and driver are start-up time (Q7).
        from parley.adapters.store.postgres import PostgresStore

        return PostgresStore(url, schema=settings.db_schema)
    raise ConfigError(
        f"database URL {url!r} is not supported; use sqlite:///<path> or postgresql://…",
        code="unsupported_database",
    )


def build_bus(store: Store) -> Bus:
    """LISTEN/NOTIFY on PostgreSQL, where several hubs may share the database; in-process on
    SQLite, which one hub holds alone."""
    if store.dialect == "postgresql":
        from parley.adapters.bus.postgres import PostgresBus
        from parley.adapters.store.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        return PostgresBus(store)
    return MemoryBus()


def default_runtimes() -> RuntimeSource:
    from parley.adapters.runtimes.factory import RuntimeRegistry

    return RuntimeRegistry()


def process_owner() -> ProcessKeeper:
    """This process's owner of the processes runtimes start (one hub per process)."""
    from parley.adapters.runtimes.ownership import OWNER

    return OWNER


def operator_token_writer(settings: Settings) -> Callable[[str], None]:
    """What the hub does after the operator's token was rotated: rewrite the token file, which
    the CLI on this machine reads and whose token no longer works."""

    def store(token: str) -> None:
        try:
            path = write_operator_token(settings.data_root(), token)
        except OSError as exc:
            # The rotation has committed and its response carries the new token: refusing now
            # would lose it. Say where the CLI's token must go instead.
            log.error(
                "the operator token was rotated but %s could not be rewritten (%s); store the "
                "new token there by hand or pass it with --token/PARLEY_TOKEN",
                exc.filename,
                exc.strerror,
            )
            return
        log.warning("the operator token was rotated; %s now holds the new one", path)

    return store


def build_hub(
    settings: Settings, *, clock: Clock | None = None, runtimes: RuntimeSource | None = None
) -> Hub:
    # The data root holds mail, runtime keys and the operator token: private to this user, and
    # an existing one left open by an older parley is closed here, before anything is written.
    secure_data_root(settings.data_root())
    store = build_store(settings)
    hub = Hub(
        settings,
        store=store,
        bus=build_bus(store),
        workspace=LocalWorkspace(),
        clock=clock,
        runtimes=runtimes if runtimes is not None else default_runtimes(),
        on_operator_rotated=operator_token_writer(settings),
        processes=process_owner(),
    )
    if isinstance(store, SqlStore):
        store.on_batch = hub.ctx.metrics.batch_committed
    return hub


DISCORD_EXTRA_HINT = "pip install 'parley[discord]'"


def discord_adapter() -> Any:
    """The Discord adapter module, or a refusal that says how to install discord.py: it comes
    with the ``discord`` extra only."""
    try:
        return importlib.import_module("parley.adapters.bridges.discord")
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "discord":
            raise
        raise ConfigError(
            f"the Discord bridge needs discord.py, which is not installed: {DISCORD_EXTRA_HINT} "
            "(or leave the PARLEY_DISCORD_* variables unset to run without the bridge)",
            code="discord_not_installed",
        ) from None


def build_discord_bridge(hub: Hub, settings: Settings) -> Bridge:
    """The Discord bridge over a hub built from ``settings``; discord.py is imported here, never
    before."""
    missing = settings.discord_missing
    if missing:
        raise ConfigError(
            f"the Discord bridge needs {', '.join(missing)}; see docs/discord.md",
            code="discord_not_configured",
        )
    discord_bridge = discord_adapter().DiscordBridge
    from parley.service.bridge.bridge import Bridge

    assert settings.discord_token is not None
    assert settings.discord_guild_id is not None
    assert settings.discord_forum_channel_id is not None
    chat = discord_bridge(
        settings.discord_token.get_secret_value(),
        guild_id=settings.discord_guild_id,
        forum_channel_id=settings.discord_forum_channel_id,
    )
    return Bridge(hub, chat, mirror_discussions=settings.discord_mirror_discussions)
