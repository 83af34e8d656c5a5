"""Surfaces: REST, MCP, CLI, web. Each only translates to and from the service layer."""
