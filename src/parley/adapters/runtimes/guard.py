"""A switch that keeps test suites from calling real models by accident.

Test suites set ``ALLOW_MODEL_REQUESTS = False`` (parley's own ``conftest.py`` does); runtimes then
refuse, when they are built, to talk to any endpoint that is not on this machine and to start the
real ``claude`` or ``codex`` executables. Production code leaves it ``True``. A hub started as a
subprocess reads the same switch from ``PARLEY_ALLOW_MODEL_REQUESTS=0``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from urllib.parse import urlsplit

from parley.core.errors import ConfigError
from parley.core.redact import redact_text

ALLOW_MODEL_REQUESTS: bool = os.environ.get("PARLEY_ALLOW_MODEL_REQUESTS", "1") != "0"

MODEL_COMMANDS = frozenset({"claude", "codex"})


def is_local_url(url: str) -> bool:
    """Whether ``url`` points at this machine (localhost or a loopback address)."""
    host = urlsplit(url).hostname
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(kind: str, base_url: str) -> None:
    """Refuse a non-local model endpoint while model requests are blocked."""
    if ALLOW_MODEL_REQUESTS or is_local_url(base_url):
        return
    raise ConfigError(
        f"model requests are blocked: the {kind} runtime would call {redact_text(base_url)!r}; "
        "point base_url at a local fake server, or set "
        "parley.adapters.runtimes.guard.ALLOW_MODEL_REQUESTS = True",
        code="model_requests_blocked",
    )


def check_command(argv: Sequence[str]) -> None:
    """Refuse to start a real model CLI (Claude Code, Codex) while model requests are blocked."""
    if ALLOW_MODEL_REQUESTS or not argv:
        return
    # The npm packages install them as ``claude.exe`` and ``codex.js`` behind the links.
    name, _ = os.path.splitext(os.path.basename(argv[0]))
    if name in MODEL_COMMANDS:
        raise ConfigError(
            f"model requests are blocked: the command runtime would start {argv[0]!r}; "
            "use a fake executable, or set "
            "parley.adapters.runtimes.guard.ALLOW_MODEL_REQUESTS = True",
            code="model_requests_blocked",
        )
