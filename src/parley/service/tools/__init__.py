"""The hub's agent tools, defined once: the MCP server offers them to connected agents, and the
``openai`` and ``anthropic`` runtimes offer them to their models through function calling.

Tools may call every capability below them (mail, conversations, meetings, workers) through the
:class:`~.registry.Services` protocol a :class:`~.registry.ToolCall` carries; they never import
the hub, which is assembled from those services and offers them."""

from parley.service.tools import channels, invitations, mail, rooms, workers
from parley.service.tools.registry import AgentTool, ToolCall, by_name, compact_schema

AGENT_TOOLS: dict[str, AgentTool] = by_name(
    mail.TOOLS, channels.TOOLS, invitations.TOOLS, rooms.TOOLS, workers.TOOLS
)
"""Every agent tool by name, in the order MCP clients list them."""

__all__ = ["AGENT_TOOLS", "AgentTool", "ToolCall", "compact_schema"]
