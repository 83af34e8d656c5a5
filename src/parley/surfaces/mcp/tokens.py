"""How many tokens a profile's tool list costs a client before the agent does anything.

Counted with the real cl100k_base byte-pair encoding, which the ``bpe-openai`` package ships
inside its wheel (no download at run time), over each tool's name, description and JSON input
schema exactly as ``tools/list`` sends them. Run ``python -m parley.surfaces.mcp.tokens`` for a
table per profile.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import tempfile
import warnings
from functools import cache
from typing import Any

from mcp.server.mcpserver import MCPServer

from parley.core.errors import ConfigError

BUDGET = 4000
# What the default profile, which most clients load, may cost.
DEFAULT_BUDGET = 3000
ENCODING = "cl100k_base"


@cache
def _encoding() -> Any:
    with warnings.catch_warnings():
        # bpe-openai reads its bundled encoding with importlib.resources.open_binary, which
        # Python deprecates; the warning is theirs to fix and must not fail a strict run.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            bpe = importlib.import_module("bpe_openai")
        except ImportError as exc:
            raise ConfigError(
                "counting tokens needs the 'bpe-openai' package (it ships the cl100k_base "
                "encoding); install parley's dev extras: pip install -e '.[dev]'"
            ) from exc
        return bpe.get_encoding(ENCODING)


def count(text: str) -> int:
    """The number of cl100k_base tokens in ``text``."""
    return len(_encoding().encode(text))


async def tool_tokens(server: MCPServer[Any]) -> dict[str, int]:
    """Tokens per tool: name + description + JSON input schema as a client receives them."""
    sizes: dict[str, int] = {}
    for tool in await server.list_tools():
        wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        schema = json.dumps(wire.get("inputSchema", {}), ensure_ascii=False)
        sizes[tool.name] = count(tool.name) + count(tool.description or "") + count(schema)
    return sizes


async def profile_tokens(server: MCPServer[Any]) -> int:
    """The total tokens of a server's tool list."""
    return sum((await tool_tokens(server)).values())


async def _report() -> int:
    from parley.bootstrap import build_hub
    from parley.config import Settings
    from parley.surfaces.mcp.server import PROFILES, build_mcp

    over = False
    with tempfile.TemporaryDirectory() as home:
        # Listing tools never touches the store, so the hub is built but not started.
        hub = build_hub(Settings(home=home))
        for profile in PROFILES:
            sizes = await tool_tokens(build_mcp(hub, profile))
            total = sum(sizes.values())
            over = over or total > BUDGET
            print(f"profile {profile}: {total} tokens ({ENCODING}, budget {BUDGET})")
            for name, size in sizes.items():
                print(f"  {name:<24} {size:>5}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_report()))
