"""The data root and the files a hub leaves in it for clients (its URL, the operator token).

Kept apart from :mod:`parley.config` so that a CLI command finds the hub without importing
pydantic-settings: coding agents call the CLI often, and each call pays its imports (Q7).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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
    import platformdirs

    return Path(platformdirs.user_data_dir("parley", appauthor=False)).resolve()


def operator_token_path(home: Path) -> Path:
    return home / "operator.token"


def write_operator_token(home: Path, token: str) -> Path:
    """Store the operator token readable by this user only (0600), replaced atomically."""
    return write_private(operator_token_path(home), token + "\n")


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
