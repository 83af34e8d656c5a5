"""``write_file``: how an agent that has no file system of its own (an ``openai`` or
``anthropic`` agent) writes a discussion summary into its workspace before it calls back."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import Field

from parley.core.errors import InvalidRequest, TooLarge
from parley.service.tools.registry import ToolCall, agent_tool

WRITE_FILE = """\
Write a UTF-8 text file in your workspace (replacing it if it exists), e.g. the summary of a \
discussion before you call discuss_callback with the same path. path is relative to your \
workspace (or absolute inside it); missing folders are created. Refused for a path that leads \
outside your workspace (file_outside_workspace), one that cannot be a file (invalid_file_path) \
or content over the size limit (file_too_large)."""


@agent_tool(WRITE_FILE)
async def write_file(
    call: ToolCall,
    path: Annotated[
        str, Field(min_length=1, max_length=4096, description="file in your workspace")
    ],
    content: Annotated[str, Field(description="the whole file")],
) -> dict[str, Any]:
    workspace = call.caller.workspace
    if not workspace:
        raise InvalidRequest(
            f"{call.caller.id!r} has no workspace directory; the operator must set one before "
            "it can write files",
            code="no_workspace",
        )
    data = content.encode("utf-8")
    limit = call.hub.settings.message_max_bytes
    if len(data) > limit:
        raise TooLarge(
            f"the file is {len(data):,} bytes; the limit is {limit:,} bytes. Write a shorter "
            "file, or split it into several",
            code="file_too_large",
            limit=limit,
            size=len(data),
        )
    # File system calls leave the event loop: a slow disk must not stall every other turn.
    written = await asyncio.to_thread(call.hub.ctx.workspace.write_inside, workspace, path, data)
    return {"path": str(written), "bytes": len(data)}


TOOLS = (write_file,)
