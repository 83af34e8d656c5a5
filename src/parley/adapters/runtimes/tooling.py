"""What the function-calling runtimes (``openai``, ``anthropic``) share: the system text that
tells the model how tools and its answer relate, decoding a call's arguments, and the bound on
rounds of tool calls in one turn."""

from __future__ import annotations

import json
from typing import Any

from parley.core.errors import RuntimeFailure
from parley.core.runtime import Prompt, ToolBox, ToolOutput, Usage


def system_text(prompt: Prompt, tools: ToolBox | None) -> str:
    """The system prompt, with the toolbox's guide when tools are offered."""
    return f"{prompt.system}\n\n{tools.guide}" if tools is not None else prompt.system


async def call_tool(tools: ToolBox, name: str, arguments: Any) -> ToolOutput:
    """Run one call; arguments arrive as a JSON text (OpenAI) or an object (Anthropic). A model
    that sends something else is told so, as the call's result."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolOutput(
                text=f"validation_error: the arguments of {name!r} are not JSON ({exc.msg}); "
                "send one JSON object",
                is_error=True,
            )
    return await tools.call(name, arguments)


def rounds_exceeded(route: str, tools: ToolBox) -> RuntimeFailure:
    """The failure of a turn whose model still calls tools after ``max_rounds`` rounds: a model
    looping on tools would otherwise hold the discussion until the deadline."""
    return RuntimeFailure(
        f"{route} was still calling tools after {tools.max_rounds} rounds of tool calls; the "
        "turn is failed. Ask the agent to answer sooner, or raise PARLEY_MAX_TOOL_ROUNDS",
        reason="tool_rounds",
        max_rounds=tools.max_rounds,
    )


def add_usage(total: Usage, more: Usage) -> Usage:
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
    )
