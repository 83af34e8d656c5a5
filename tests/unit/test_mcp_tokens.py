"""The size of the MCP tool list: counted with the real cl100k_base encoding, kept small."""

from __future__ import annotations

from pathlib import Path

from parley.bootstrap import build_hub
from parley.config import Settings
from parley.surfaces.mcp import PROFILES, build_mcp
from parley.surfaces.mcp.server import compact_schema
from parley.surfaces.mcp.tokens import (
    BUDGET,
    DEFAULT_BUDGET,
    count,
    profile_tokens,
    tool_tokens,
)


def test_the_counter_is_cl100k_base() -> None:
    # Known cl100k_base encodings: "hello world" is [15339, 1917].
    assert count("hello world") == 2
    assert count("") == 0
    assert count("antidisestablishmentarianism") > 3


async def test_every_profile_fits_the_budget(tmp_path: Path) -> None:
    hub = build_hub(Settings(home=tmp_path))  # listing tools never opens the store
    for profile in PROFILES:
        server = build_mcp(hub, profile)
        sizes = await tool_tokens(server)
        assert list(sizes) == list(PROFILES[profile])
        assert all(size > 0 for size in sizes.values())
        total = await profile_tokens(server)
        assert total == sum(sizes.values())
        assert total < BUDGET, f"profile {profile!r} costs {total} tokens"


async def test_the_default_profile_fits_its_own_budget(tmp_path: Path) -> None:
    hub = build_hub(Settings(home=tmp_path))
    total = await profile_tokens(build_mcp(hub, "default"))
    assert total <= DEFAULT_BUDGET, f"the default profile costs {total} tokens"


def test_compact_schema_drops_pydantic_noise_only() -> None:
    schema = {
        "title": "args",
        "type": "object",
        "properties": {
            "title": {"title": "Title", "type": "string", "description": "kept: a parameter"},
            "cc": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
                "title": "Cc",
            },
            "mode": {"anyOf": [{"type": "string"}, {"type": "integer"}], "default": "x"},
        },
        "required": ["title"],
    }
    assert compact_schema(schema) == {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "kept: a parameter"},
            "cc": {"type": "array", "items": {"type": "string"}},
            "mode": {"anyOf": [{"type": "string"}, {"type": "integer"}], "default": "x"},
        },
        "required": ["title"],
    }
