"""MCP wake latency and tool-list size (SPEC S3, M5 live push).

* ``wake_p50_ms`` / ``wake_p99_ms``: agent A calls ``send_message`` to agent B while B is
  blocked in ``wait_for_mail``; latency = from the start of A's call to the return of B's wait.
  A and B are real MCP clients over Streamable HTTP with their own tokens, against a hub served
  by uvicorn in a child process. After each message B re-arms its wait; it is given a moment to
  reach the hub before A sends, so every sample is a wake, not a pick-up of waiting mail.
* ``<profile>_profile_tokens``, one per profile (``default``, ``mail``, ``discuss``, ``rooms``,
  ``workers``): what its ``tools/list`` costs a client, in cl100k_base tokens (names,
  descriptions, schemas).

Progress goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from common import database, ms, parse_args, run_main
from hub_server import HubProcess, machine_description, percentile, progress
from mcp_client import mcp_session, result_data

# A wait that has not yet reached the hub would find the mail already there: give it time.
ARM_S = 0.02
WAIT_S = 30.0


async def profile_sizes(scratch: Path) -> dict[str, dict[str, int]]:
    """Tokens per tool of every profile, counted on the tool lists the server builds."""
    from parley.bootstrap import build_hub
    from parley.config import Settings
    from parley.surfaces.mcp import PROFILES, build_mcp
    from parley.surfaces.mcp.tokens import tool_tokens

    # Listing tools never touches the store: the hub is built, not started.
    hub = build_hub(Settings(home=scratch / "tokens"))
    return {profile: await tool_tokens(build_mcp(hub, profile)) for profile in PROFILES}


async def create_agents(server: HubProcess, *ids: str) -> dict[str, str]:
    op = {"Authorization": f"Bearer {server.operator_token}"}
    tokens = {}
    async with httpx.AsyncClient(base_url=server.url, headers=op, timeout=30) as http:
        for agent_id in ids:
            response = await http.post("/v1/agents", json={"id": agent_id})
            response.raise_for_status()
            tokens[agent_id] = response.json()["token"]
    return tokens


async def measure_wakes(server: HubProcess, samples: int, warmup: int) -> dict[str, Any]:
    tokens = await create_agents(server, "bench-a", "bench-b")
    wakes: list[float] = []
    sends: list[float] = []
    async with (
        mcp_session(server.url, tokens["bench-a"], WAIT_S + 30.0) as a,
        mcp_session(server.url, tokens["bench-b"], WAIT_S + 30.0) as b,
    ):
        for n in range(warmup + samples):
            waiting = asyncio.create_task(b.call_tool("wait_for_mail", {"timeout_s": WAIT_S}))
            await asyncio.sleep(ARM_S)
            t0 = time.perf_counter()
            sent = result_data(
                await a.call_tool(
                    "send_message",
                    {"to": "bench-b", "kind": "notice", "subject": f"wake {n}", "body": "."},
                )
            )
            t1 = time.perf_counter()
            woke = result_data(await waiting)
            t2 = time.perf_counter()
            if [m["id"] for m in woke["messages"]] != [sent["id"]]:
                raise RuntimeError(f"sample {n}: the wait returned {woke!r}, not {sent['id']}")
            if n >= warmup:
                sends.append((t1 - t0) * 1000)
                wakes.append((t2 - t0) * 1000)
            if n and n % 100 == 0:
                progress(f"{n} wakes measured")
    wakes.sort()
    sends.sort()
    return {
        "wake_p50_ms": ms(percentile(wakes, 50), 2),
        "wake_p99_ms": ms(percentile(wakes, 99), 2),
        "wake_max_ms": ms(wakes[-1] if wakes else None, 2),
        "send_p50_ms": ms(percentile(sends, 50), 2),
        "samples": len(wakes),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    machine = machine_description()
    samples = args.samples or (100 if args.quick else 1000)
    scratch = Path(tempfile.mkdtemp(prefix="parley-bench-mcp-"))
    try:
        sizes = await profile_sizes(scratch)
        async with database(args.backend, "parley_bench_mcp_") as url:
            server = HubProcess(scratch / "hub", url)
            try:
                await server.start()
                progress(f"hub pid {server.pid} at {server.url}; {samples} wakes")
                wakes = await measure_wakes(server, samples, warmup=10)
            finally:
                server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "bench": "mcp_wake",
        "backend": args.backend,
        "quick": args.quick,
        **wakes,
        **{f"{profile}_profile_tokens": sum(tools.values()) for profile, tools in sizes.items()},
        "tool_tokens": sizes["default"],
        "arm_ms": ARM_S * 1000,
        "machine": machine,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, counts=[("--samples", "measured wakes")])
    run_main(args, lambda: run(args))


if __name__ == "__main__":
    main()
