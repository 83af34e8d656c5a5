"""The MCP surface: parley's tools for agents over Streamable HTTP (``/mcp``) and stdio."""

from parley.surfaces.mcp.server import PROFILES, build_mcp

__all__ = ["PROFILES", "build_mcp"]
