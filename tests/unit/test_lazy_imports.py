"""Start-up stays fast (Q7): what the CLI and the hub must not import before they need it.

Each check runs a fresh interpreter, so modules imported by other tests cannot hide a regression.
Timings are measured by ``bench/startup.py``, never here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# Client commands talk HTTP to a running hub: no server stack, no SDK, no settings model.
CLI_MUST_NOT_IMPORT = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "pydantic",
    "pydantic_settings",
    "openai",
    "anthropic",
    "mcp",
    "prometheus_client",
    "httpx",  # imported by the first command that sends a request, not by --help
    "discord",  # the Discord bridge's library: `parley serve --discord` and `discord check`
)
PROVIDER_SDKS = ("openai", "anthropic")


def loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` are in ``sys.modules`` after running ``code`` in a new interpreter."""
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import sys
        print("loaded:" + ",".join(n for n in {names!r} if n in sys.modules))
    """)
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("loaded:"), done.stdout
    return [n for n in last.removeprefix("loaded:").split(",") if n]


def test_the_cli_imports_no_server_stack_sdk_or_settings_model() -> None:
    assert loaded_after("import parley.surfaces.cli.app", CLI_MUST_NOT_IMPORT) == []


def test_a_started_hub_imports_no_provider_sdk_nor_mcp_before_it_needs_them(
    tmp_path: Path,
) -> None:
    code = f"""
        import asyncio
        from parley.bootstrap import build_hub
        from parley.config import Settings
        from parley.surfaces.rest.app import create_app

        async def main():
            hub = build_hub(Settings(home={str(tmp_path)!r}))
            await hub.start(background=False)
            app = create_app(hub=hub)
            async with app.router.lifespan_context(app):
                hub.runtimes.get("a", {{"kind": "scripted"}})
                hub.runtimes.validate({{"kind": "command", "argv": ["true"]}})
            await hub.stop()

        asyncio.run(main())
    """
    # The MCP SDK waits for the first request to /mcp; discord.py for a configured bridge.
    assert loaded_after(code, (*PROVIDER_SDKS, "mcp", "discord")) == []


def test_an_openai_agent_loads_its_sdk_and_only_that_one() -> None:
    code = """
        from parley.adapters.runtimes.factory import validate_runtime_config
        validate_runtime_config({"kind": "openai", "model": "m"})
    """
    assert loaded_after(code, PROVIDER_SDKS) == ["openai"]
