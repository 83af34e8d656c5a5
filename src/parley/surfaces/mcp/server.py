"""The MCP server: parley's tools, grouped into profiles, over the one service layer.

The tools are defined once, in :mod:`parley.service.tools` (the ``openai`` and ``anthropic``
runtimes offer the same definitions through function calling); here each is registered as an
MCP tool that authenticates the caller (:mod:`.auth`), runs the definition and renders its
result. A refusal becomes a tool error whose text starts with the same stable
code as the REST error body, e.g. ``inbox_forbidden: …`` (:mod:`.results`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from parley import __version__
from parley.core.errors import ConfigError, InvalidRequest, ParleyError
from parley.service.hub import Hub
from parley.service.tools import AGENT_TOOLS, AgentTool, ToolCall
from parley.service.tools.registry import check_storable, compact_schema
from parley.service.tools.toolbox import NOT_IN_A_TURN
from parley.surfaces.mcp.auth import Authenticator
from parley.surfaces.mcp.results import error_result, invalid_arguments, json_result

ToolFunction = Callable[..., Any]

INSTRUCTIONS = """\
parley is the coordination hub you share with other agents and humans. Your token decides who \
you are; no argument can make you speak as someone else. Start with whoami. Handle mail with \
check_inbox, read_message and update_message; block on wait_for_mail or wait_for_turn instead \
of polling. In a discussion: wait_for_turn, then speak (or no_reply) before the deadline; end a \
reply with [[DISCUSSION_DONE]] to vote to end. Only the initiator finishes it: write the summary \
file in your workspace, then discuss_callback. In a meeting room: once summoned, \
wait_for_turn and speak each turn (no tools, within the hard limit), then your minutes when \
asked; stop_meeting needs no room id. As a child worker, your task arrives as a turn: answer it \
with speak or report_result. A refused call returns an error that starts with a stable code \
(e.g. 'message_forbidden: …') and says what to do instead."""

# Which tools each profile offers, in the order clients list them; "default" offers mail,
# channels, discussions, invitations and turns. One connection serves one profile: a client that
# needs two connects twice (one server entry per profile).
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
ROOM_TOOLS = (
    "join_room",
    "leave_room",
    "convene",
    "meeting_status",
    "stop_meeting",
    "post_brief",
    "mark_done",
)
WORKER_TOOLS = (
    "spawn_child",
    "report_result",
    "cancel_worker",
    "takeover",
    "topology",
    "worker_status",
    "heartbeat",
    "read_artifact",
)
PROFILES: dict[str, tuple[str, ...]] = {
    # Within DEFAULT_BUDGET tokens: the room tools (joining, convening, briefs) live in "rooms"
    # and the worker tools in "workers"; a default agent still takes its meeting turns with
    # wait_for_turn and speak.
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
    # A remote member's meeting turns (speeches, then its minutes) come through wait_for_turn
    # and are answered with speak; its minutes also arrive as mail, which wait_for_mail returns.
    "rooms": IDENTITY_TOOLS + ROOM_TOOLS + TURN_TOOLS + ("wait_for_mail",),
    # Not in "default", whose descriptions would pass their token budget with them. A child
    # takes its task-dispatch turn with wait_for_turn and answers it with speak (or
    # report_result); a parent finds its children's task-results in its inbox.
    "workers": IDENTITY_TOOLS
    + WORKER_TOOLS
    + ("wait_for_turn", "speak", "check_inbox", "wait_for_mail"),
}


class ParleyMCP(MCPServer[Any]):
    """An MCPServer that answers parley's refusals, and arguments that do not fit a tool's
    schema, with tool errors carrying a stable code."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            check_storable(name, arguments or {})
        except ParleyError as exc:
            return error_result(exc)
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


def mcp_function(tool: AgentTool, hub: Hub, auth: Authenticator) -> ToolFunction:
    """``tool`` as an MCP tool function: the SDK reads its arguments from the signature (a
    Context parameter, then the definition's arguments)."""

    async def run(ctx: Context[Any, Any], **arguments: Any) -> CallToolResult:
        caller, turn = await auth.caller_and_turn(ctx)
        if turn is None:
            call = ToolCall(hub=hub, caller=caller)
        else:
            # Made from inside a CLI's turn: "the worker of the turn you are in" is that
            # turn's, as through function calling.
            if tool.name in NOT_IN_A_TURN:
                raise InvalidRequest(
                    f"{tool.name} cannot be called from inside a turn: your final reply is the "
                    "turn's answer, and a turn must not wait for another",
                    code="not_in_a_turn",
                )
            call = ToolCall(
                hub=hub, caller=caller, channel_id=turn.channel_id, session_id=turn.session_id
            )
        return json_result(await tool.handler(call, **arguments))

    context = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context[Any, Any]
    )
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [context, *tool.parameters], return_annotation=CallToolResult
    )
    run.__name__ = tool.name
    return run


def build_tools(hub: Hub, auth: Authenticator, names: Iterable[str]) -> list[Tool]:
    """The MCP tools ``names``, each over its definition in :data:`AGENT_TOOLS`."""
    tools = []
    for name in names:
        definition = AGENT_TOOLS[name]
        tool = Tool.from_function(
            mcp_function(definition, hub, auth), name=name, description=definition.description
        )
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
    return ParleyMCP(
        "parley",
        title="parley",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=build_tools(hub, Authenticator(hub, token), names),
        log_level="WARNING",
    )
