"""The MCP surface: parley's tools for agents over Streamable HTTP (``/mcp``) and stdio."""

from __future__ import annotations

from typing import Any

__all__ = ["PROFILES", "build_mcp"]


def __getattr__(name: str) -> Any:
    # The server module imports the MCP SDK: loaded on first use, not with the hub's web app.
    if name in __all__:
        from parley.surfaces.mcp import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
