"""The MCP server: parley's tools, grouped into profiles, over the one service layer.

Tools never re-implement a rule: they authenticate the caller (:mod:`.auth`), call ``hub.*``
and render the result. A refusal becomes a tool error whose text starts with the same stable
code as the REST error body, e.g. ``inbox_forbidden: …`` (:mod:`.results`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from parley import __version__
from parley.core.errors import ConfigError, InvalidRequest, ParleyError
from parley.core.limits import json_problem
from parley.service.hub import Hub
from parley.surfaces.mcp import channel_tools, invitation_tools, mail_tools
from parley.surfaces.mcp.auth import Authenticator
from parley.surfaces.mcp.results import error_result, invalid_arguments

INSTRUCTIONS = """\
parley is the coordination hub you share with other agents and humans. Your token decides who \
you are; no argument can make you speak as someone else. Start with whoami. Handle mail with \
check_inbox, read_message and update_message; block on wait_for_mail or wait_for_turn instead \
of polling. In a discussion: wait_for_turn, then speak (or no_reply) before the deadline; end a \
reply with [[DISCUSSION_DONE]] to vote to end. Only the initiator finishes it: write the summary \
file in your workspace, then discuss_callback. A refused call returns an error that starts with \
a stable code (e.g. 'message_forbidden: …') and says what to do instead."""

# Which tools each profile offers, in the order clients list them; "default" offers them all.
IDENTITY_TOOLS = ("whoami",)
MAIL_TOOLS = (
    "send_message",
    "check_inbox",
    "read_message",
    "update_message",
    "thread",
    "wait_for_mail",
)
CHANNEL_TOOLS = ("list_channels", "read_channel", "post")
DISCUSSION_TOOLS = ("create_private_channel", "discuss_callback")
INVITATION_TOOLS = (
    "invite_to_channel",
    "list_invitations",
    "accept_invitation",
    "decline_invitation",
)
TURN_TOOLS = ("wait_for_turn", "speak", "no_reply")
PROFILES: dict[str, tuple[str, ...]] = {
    "default": IDENTITY_TOOLS
    + MAIL_TOOLS
    + CHANNEL_TOOLS
    + DISCUSSION_TOOLS
    + INVITATION_TOOLS
    + TURN_TOOLS,
    "mail": IDENTITY_TOOLS + MAIL_TOOLS,
    # wait_for_mail too: an initiator learns from an inbox notice that the rounds have ended
    # and that it should now write the summary (and an invitee, that it was invited).
    "discuss": IDENTITY_TOOLS
    + CHANNEL_TOOLS
    + DISCUSSION_TOOLS
    + INVITATION_TOOLS
    + TURN_TOOLS
    + ("wait_for_mail",),
}


class ParleyMCP(MCPServer[Any]):
    """An MCPServer that answers parley's refusals, and arguments that do not fit a tool's
    schema, with tool errors carrying a stable code."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        # The same guard as the REST edge: text no store can hold (NUL, lone surrogates, NaN) is
        # refused with invalid_text before it reaches a lookup, instead of failing in the driver.
        for key, value in (arguments or {}).items():
            problem = json_problem(value)
            if problem is not None:
                return error_result(
                    InvalidRequest(
                        f"argument {key!r} of {name!r} {problem}; remove it and retry",
                        code="invalid_text",
                        field=key,
                    )
                )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # The SDK wraps whatever the tool raised; the cause is what the caller must read.
            cause = exc.__cause__
            if isinstance(cause, ParleyError):
                return error_result(cause)
            if isinstance(cause, ValidationError):
                return invalid_arguments(name, cause)
            raise


def compact_schema(schema: Any) -> Any:
    """Drop what pydantic adds for its own sake (titles, the ``null`` branch and ``default:
    null`` of optional parameters): every client pays tokens for the tool list."""
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and value is None:
            continue
        if key == "properties" and isinstance(value, dict):
            # Property names are data, not keywords: a parameter may be called 'title'.
            out[key] = {name: compact_schema(sub) for name, sub in value.items()}
        else:
            out[key] = compact_schema(value)
    branches = out.get("anyOf")
    if isinstance(branches, list):
        typed = [b for b in branches if b != {"type": "null"}]
        if len(typed) == 1 < len(branches):
            del out["anyOf"]
            out = {**typed[0], **out}
    return out


def describe(fn: Any) -> str:
    """A docstring as one paragraph: line breaks inside a description are tokens too."""
    return " ".join(inspect.cleandoc(fn.__doc__ or "").split())


def build_tools(functions: dict[str, Any], names: Iterable[str]) -> list[Tool]:
    tools = []
    for name in names:
        fn = functions[name]
        tool = Tool.from_function(fn, name=name, description=describe(fn))
        tool.parameters = compact_schema(tool.parameters)
        tools.append(tool)
    return tools


def build_mcp(hub: Hub, profile: str = "default", *, token: str | None = None) -> MCPServer[Any]:
    """The MCP server of ``profile`` over ``hub``. ``token`` authenticates calls that arrive
    without HTTP headers (stdio, in memory); a call over HTTP always uses its own header."""
    names = PROFILES.get(profile)
    if names is None:
        raise ConfigError(
            f"MCP profile {profile!r} is unknown; use one of {', '.join(PROFILES)}",
            code="unknown_profile",
            profiles=list(PROFILES),
        )
    auth = Authenticator(hub, token)
    functions = {
        **mail_tools.functions(hub, auth),
        **channel_tools.functions(hub, auth),
        **invitation_tools.functions(hub, auth),
    }
    return ParleyMCP(
        "parley",
        title="parley",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=build_tools(functions, names),
        log_level="WARNING",
    )
