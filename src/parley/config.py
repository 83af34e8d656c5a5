"""Configuration (pydantic-settings) and the one place the data root is resolved.

The data root is explicit configuration (``--home`` or ``home=``) > ``PARLEY_HOME`` > the
platform's user data directory — never the current working directory. A hub whose data root
followed the directory it was started from would silently come up empty when started elsewhere
(source 002, invariant 4).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from parley.core.errors import ConfigError
from parley.private_files import write_private

DEFAULT_PORT = 8765


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the data root: explicit > PARLEY_HOME > user data dir. Always absolute."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get("PARLEY_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_data_dir("parley", appauthor=False)).resolve()


class Settings(BaseSettings):
    """Hub settings; every field can be set as ``PARLEY_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", extra="ignore")

    home: Path | None = None
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    broadcast_interval_s: float = Field(default=60.0, ge=0)
    expiry_sweep_s: float = Field(default=5.0, gt=0)
    discussion_stale_s: float = Field(default=1800.0, gt=0)
    stale_sweep_s: float = Field(default=30.0, gt=0)
    turn_timeout_s: float = Field(default=120.0, gt=0)
    payload_max_bytes: int = Field(
        default=64 * 1024, ge=1, description="Largest mail payload, in bytes of its JSON encoding."
    )
    message_max_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="Largest mail message (all its fields) or channel post, in UTF-8 bytes.",
    )
    send_rate_per_minute: int = Field(
        default=600,
        ge=0,
        description="Messages and posts one sender may store a minute; 0: no limit.",
    )
    send_bytes_per_minute: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        description="Bytes one sender may store a minute, every copy counted; 0: no limit.",
    )
    page_max_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="A page of a list or stream backfill takes no more rows once this full.",
    )
    request_max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1,
        description="Largest request body the hub reads, in bytes (413 above it); room for a "
        "mailroom import of a few thousand messages.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest pause, in seconds, between two parts of a request body (then 408).",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Open connections the server accepts before it answers 503.",
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
    def is_postgres(self) -> bool:
        url = self.resolved_database_url()
        return url.startswith(("postgresql", "postgres://"))


def operator_token_path(home: Path) -> Path:
    return home / "operator.token"


def write_operator_token(home: Path, token: str) -> Path:
    """Store the operator token readable by this user only (0600). It is written to a new file
    renamed over the old one, so a CLI reading it meanwhile finds the old token or the new one,
    never an empty file."""
    path = operator_token_path(home)
    fd, temp = tempfile.mkstemp(dir=home, prefix=".operator.token.")  # created 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def hub_info_path(home: Path) -> Path:
    return home / "hub.json"


def write_hub_info(home: Path, url: str) -> None:
    write_private(hub_info_path(home), json.dumps({"url": url, "pid": os.getpid()}) + "\n")


def read_hub_info(home: Path) -> dict[str, Any]:
    path = hub_info_path(home)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not valid JSON; delete it and restart the hub") from exc
    return data if isinstance(data, dict) else {}
