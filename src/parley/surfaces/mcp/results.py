"""Tool results: compact JSON for the model, the same data as structured content, and domain
errors as tool errors carrying the stable code REST uses."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from parley.core.errors import ParleyError


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
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
        for err in exc.errors()
    )
    return error_result(
        ParleyError(
            f"the arguments of {tool!r} are not valid: {problems}; see the tool's input schema",
            code="validation_error",
        )
    )


def without_empty(data: Mapping[str, Any], drop: Iterable[str] = ()) -> dict[str, Any]:
    """A record without its empty fields: an agent reads every character it is given."""
    dropped = set(drop)
    return {
        k: v
        for k, v in data.items()
        if k not in dropped and v is not None and v != [] and v != {} and v != ""
    }
