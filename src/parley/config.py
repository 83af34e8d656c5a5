"""Configuration (pydantic-settings). The data root and its files are :mod:`parley.home`'s.

The data root is explicit configuration (``--home`` or ``home=``) > ``PARLEY_HOME`` > the
platform's user data directory — never the current working directory. A hub whose data root
followed the directory it was started from would silently come up empty when started elsewhere
(source 002, invariant 4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from parley.core.settings import HubSettings

# Defined in parley.home (no pydantic-settings, for the CLI's start-up); importable from here
# for the hub's side.
from parley.home import (
    DEFAULT_PORT,
    hub_info_path,
    operator_token_path,
    read_hub_info,
    resolve_home,
    write_hub_info,
    write_operator_token,
)

__all__ = [
    "DEFAULT_PORT",
    "Settings",
    "hub_info_path",
    "operator_token_path",
    "read_hub_info",
    "resolve_home",
    "write_hub_info",
    "write_operator_token",
]


class Settings(HubSettings, BaseSettings):
    """Hub settings: the hub's limits and timings (:class:`~parley.core.settings.HubSettings`)
    and where its data lives, how it listens and what it connects to. Every field can be set as
    ``PARLEY_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", extra="ignore")

    home: Path | None = None
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    sqlite_synchronous: Literal["normal", "full"] = Field(
        default="normal",
        description="When a commit to the SQLite store is durable. `normal`: it survives a "
        "crash of the hub (kill -9), but the last commits can be lost if the machine loses "
        "power. `full`: it survives losing power too, at one fsync per commit; the writer "
        "commits concurrent writes together, so this costs latency more than throughput.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="How `parley serve` writes log records: text lines, or one JSON object a line.",
    )
    discord_token: SecretStr | None = Field(
        default=None,
        description="The Discord bot's token (PARLEY_DISCORD_TOKEN); never logged or shown.",
    )
    discord_guild_id: int | None = Field(
        default=None, description="The Discord server (guild) the bridge serves."
    )
    discord_forum_channel_id: int | None = Field(
        default=None,
        description="The forum channel where each worker and discussion gets a post.",
    )
    discord_mirror_discussions: bool = Field(
        default=True,
        description="Give every discussion channel a post of its own in the forum.",
    )
    db_schema: str | None = Field(
        default=None,
        pattern=r"^[a-z_][a-z0-9_]{0,47}$",
        description="PostgreSQL only: the schema that holds parley's tables (created if "
        "missing; lower-case letters, digits and _), so that parley can share a database with "
        "other applications. Unset: the connection's own (public, or the first of the "
        "search_path the URL sets with ?options=-csearch_path=...). A database or schema "
        "holding tables parley did not create is refused (foreign_database).",
    )
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    openai_model: str | None = None

    def data_root(self) -> Path:
        return resolve_home(self.home)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_root() / 'parley.db'}"

    @property
    def discord_configured(self) -> bool:
        """Whether the Discord bridge has what it needs to start (token, guild, forum)."""
        return not self.discord_missing

    @property
    def discord_missing(self) -> list[str]:
        """The environment variables the Discord bridge needs that are not set."""
        return [
            env
            for env, value in (
                ("PARLEY_DISCORD_TOKEN", self.discord_token),
                ("PARLEY_DISCORD_GUILD_ID", self.discord_guild_id),
                ("PARLEY_DISCORD_FORUM_CHANNEL_ID", self.discord_forum_channel_id),
            )
            if not value
        ]

    @property
    def is_postgres(self) -> bool:
        url = self.resolved_database_url()
        return url.startswith(("postgresql", "postgres://"))
