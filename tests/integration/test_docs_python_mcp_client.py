"""The Python MCP SDK example of docs/agents.md runs as printed against a hub and acts as the
agent whose token it carries."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent
from tests.integration.mail_support import send
from tests.integration.mcp_support import serving

AGENTS_MD = Path(__file__).parents[2] / "docs" / "agents.md"
MARKER = "<!-- tested: tests/integration/test_docs_python_mcp_client.py runs this block -->"


def documented_example() -> str:
    text = AGENTS_MD.read_text(encoding="utf-8")
    found = re.search(re.escape(MARKER) + r"\n```python\n(.*?)\n```\n", text, re.DOTALL)
    assert found is not None, f"docs/agents.md has no python block after {MARKER!r}"
    return found.group(1)


def run_example(code: str) -> None:
    # The example calls asyncio.run itself: it gets a thread, and so a loop, of its own.
    exec(compile(code, str(AGENTS_MD), "exec"), {"__name__": "__main__"})


async def test_the_documented_python_client_connects_with_its_bearer_token(
    hub: Hub,
    make_agent: MakeAgent,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    await send(hub, bob.principal, "alice", "notice", subject="hello alice")
    code = documented_example()
    async with serving(create_app(hub=hub)) as url:
        monkeypatch.setenv("PARLEY_MCP_URL", f"{url}/mcp")
        monkeypatch.setenv("PARLEY_TOKEN", alice.token)
        await asyncio.to_thread(run_example, code)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "connected as alice"
    mail = json.loads(out[1])
    assert [m["subject"] for m in mail["messages"]] == ["hello alice"]
