"""What an agent tool is: one definition that every transport offers the same way.

A tool is an async function whose first parameter is the :class:`ToolCall` (the hub and the
caller, decided by the transport's authentication, never by an argument) and whose other
parameters are its arguments, annotated for pydantic; it returns the JSON result and raises a
:class:`~parley.core.errors.ParleyError` to refuse. The MCP server registers these functions as
MCP tools; the ``openai`` and ``anthropic`` runtimes offer them through function calling
(:mod:`.toolbox`). Name, description and argument schema are therefore the same on both.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from parley.core.errors import InvalidRequest, ParleyError
from parley.core.identity import Principal
from parley.core.limits import json_problem
from parley.core.ports import Store
from parley.core.settings import HubSettings
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.conversations.discussions import Discussions
from parley.service.conversations.invitations import Invitations
from parley.service.conversations.turns import Turns
from parley.service.mail.mailbox import Mail
from parley.service.meetings.meetings import Meetings
from parley.service.meetings.rooms import Rooms
from parley.service.workers.workers import Workers


class Services(Protocol):
    """The services a tool acts through (the hub is one): tools depend on this, not on the
    hub, which is assembled from them and offers them."""

    @property
    def ctx(self) -> ServiceContext: ...
    @property
    def settings(self) -> HubSettings: ...
    @property
    def store(self) -> Store: ...
    @property
    def mail(self) -> Mail: ...
    @property
    def channels(self) -> Channels: ...
    @property
    def turns(self) -> Turns: ...
    @property
    def discussions(self) -> Discussions: ...
    @property
    def invitations(self) -> Invitations: ...
    @property
    def rooms(self) -> Rooms: ...
    @property
    def meetings(self) -> Meetings: ...
    @property
    def workers(self) -> Workers: ...


@dataclass(frozen=True)
class ToolCall:
    """Who calls a tool and from where: the caller comes from its token (MCP) or from the turn
    the hub gave it (runtimes), never from the arguments."""

    hub: Services
    caller: Principal
    # The channel and logical session of the turn the call is made in: a runtime's function
    # call, or an MCP call made with the token the hub issued for a CLI's turn. An MCP call
    # made with the agent's own token has no turn (tools fall back to the caller's defaults).
    channel_id: str | None = None
    session_id: str | None = None


ToolHandler = Callable[..., Awaitable[dict[str, Any]]]


class _Arguments(BaseModel):
    """The arguments of a tool call; unknown names are ignored as the MCP SDK ignores them."""

    model_config = ConfigDict(arbitrary_types_allowed=True)


@dataclass(frozen=True)
class AgentTool:
    """One tool: its name, the description the agent reads (its manual: source 002 §5.7) and
    the handler, whose signature after the :class:`ToolCall` is the argument schema."""

    name: str
    description: str
    handler: ToolHandler

    @cached_property
    def parameters(self) -> tuple[inspect.Parameter, ...]:
        """The handler's arguments with their annotations evaluated, the ToolCall left out."""
        signature = inspect.signature(self.handler, eval_str=True)
        return tuple(signature.parameters.values())[1:]

    @cached_property
    def arguments(self) -> type[BaseModel]:
        """A pydantic model of the arguments, which validates a call's arguments."""
        fields: dict[str, Any] = {
            p.name: (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
            for p in self.parameters
        }
        return create_model(f"{self.name}Arguments", __base__=_Arguments, **fields)

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments object, as compact as MCP lists it."""
        schema: dict[str, Any] = compact_schema(self.arguments.model_json_schema())
        return schema

    async def run(self, call: ToolCall, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``arguments`` (pydantic's ValidationError if they do not fit) and run."""
        values = self.arguments.model_validate(dict(arguments))
        return await self.handler(
            call, **{p.name: getattr(values, p.name) for p in self.parameters}
        )


def arguments_refused(tool: str, exc: ValidationError) -> ParleyError:
    """Arguments that do not fit a tool's schema, refused with the REST code for the same."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
        for err in exc.errors()
    )
    return ParleyError(
        f"the arguments of {tool!r} are not valid: {problems}; see the tool's input schema",
        code="validation_error",
    )


def check_storable(tool: str, arguments: Mapping[str, Any]) -> None:
    """The guard of every edge (REST, MCP, function calling): text no store can hold (NUL, lone
    surrogates, NaN) is refused with ``invalid_text`` before it reaches a lookup, instead of
    failing in the driver."""
    for key, value in arguments.items():
        problem = json_problem(value)
        if problem is not None:
            raise InvalidRequest(
                f"argument {key!r} of {tool!r} {problem}; remove it and retry",
                code="invalid_text",
                field=key,
            )


def agent_tool(description: str | None = None) -> Callable[[ToolHandler], AgentTool]:
    """Declare a handler as a tool named after it; the description defaults to its docstring."""

    def define(handler: ToolHandler) -> AgentTool:
        text = description if description is not None else handler.__doc__
        return AgentTool(name=handler.__name__, description=describe(text), handler=handler)

    return define


def describe(text: str | None) -> str:
    """A description as one paragraph: line breaks inside a description are tokens too."""
    return " ".join(inspect.cleandoc(text or "").split())


def by_name(*groups: Iterable[AgentTool]) -> dict[str, AgentTool]:
    """The tools of ``groups`` by name, refusing a name defined twice."""
    tools: dict[str, AgentTool] = {}
    for group in groups:
        for tool in group:
            if tool.name in tools:
                raise ValueError(f"agent tool {tool.name!r} is defined twice")
            tools[tool.name] = tool
    return tools


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


def without_empty(data: Mapping[str, Any], drop: Iterable[str] = ()) -> dict[str, Any]:
    """A record without its empty fields: an agent reads every character it is given."""
    dropped = set(drop)
    return {
        k: v
        for k, v in data.items()
        if k not in dropped and v is not None and v != [] and v != {} and v != ""
    }
