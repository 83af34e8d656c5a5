"""Tool results: compact JSON for the model, the same data as structured content, and domain
errors as tool errors carrying the stable code REST uses."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from parley.core.errors import ParleyError
from parley.service.tools.registry import arguments_refused, without_empty

__all__ = ["error_result", "invalid_arguments", "json_result", "without_empty"]


def json_result(data: dict[str, Any]) -> CallToolResult:
    """A successful result."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def error_result(exc: ParleyError) -> CallToolResult:
    """A refusal: ``code: message`` for the model, the REST error body ``{code, message,
    details}`` as structured content for programs."""
    return CallToolResult(
        content=[TextContent(type="text", text=f"{exc.code}: {exc.message}")],
        structured_content=exc.to_dict(),
        is_error=True,
    )


def invalid_arguments(tool: str, exc: ValidationError) -> CallToolResult:
    """Arguments that do not fit the input schema, with the REST code for the same thing."""
    return error_result(arguments_refused(tool, exc))
