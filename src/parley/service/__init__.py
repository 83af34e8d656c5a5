"""The one service layer every surface (REST, MCP, CLI, web) calls. It owns transactions and
enforces every rule; surfaces only translate."""

from parley.service.hub import Hub

__all__ = ["Hub"]
