"""What the function-calling runtimes (``openai``, ``anthropic``) share: the system text that
tells the model how tools and its answer relate, decoding a call's arguments, and the count of
tokens and rounds of tool calls in one turn."""

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


class ToolRounds:
    """The bookkeeping of one turn's exchange with its model: tokens used over all its calls,
    and the rounds of tool calls, bounded by the toolbox's ``max_rounds`` (a model looping on
    tools would otherwise hold the discussion until the deadline)."""

    def __init__(self, route: str, tools: ToolBox | None) -> None:
        self.route = route
        self.max_rounds = tools.max_rounds if tools is not None else 0
        self.done = 0
        self.usage = Usage()

    def used(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        model: str = "",
        cache_read: int = 0,
        cache_write: int = 0,
    ) -> None:
        """Count the tokens of one call to the model; ``model`` is the one that answered."""
        u = self.usage
        self.usage = Usage(
            input_tokens=u.input_tokens + input_tokens,
            output_tokens=u.output_tokens + output_tokens,
            cache_read_tokens=u.cache_read_tokens + cache_read,
            cache_write_tokens=u.cache_write_tokens + cache_write,
            model=model or u.model,
        )

    def next(self) -> None:
        """Start another round of tool calls, or fail the turn if the model has had its
        ``max_rounds``."""
        if self.done >= self.max_rounds:
            raise RuntimeFailure(
                f"{self.route} was still calling tools after {self.max_rounds} rounds of tool "
                "calls; the turn is failed. Ask the agent to answer sooner, or raise "
                "PARLEY_MAX_TOOL_ROUNDS",
                reason="tool_rounds",
                max_rounds=self.max_rounds,
            )
        self.done += 1
