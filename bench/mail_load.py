"""One REST load-generator process for ``bench/mail.py``: keep-alive HTTP/1.1 senders.

Reads its job as JSON from stdin, waits for the agreed wall-clock start so that every load
process begins together, runs ``concurrency`` asyncio tasks that each ``POST /v1/mail`` one
request after another until the duration is over, and prints one JSON result line on stdout.
Each request carries ``payload.t_ns`` (``time.time_ns()`` just before sending) so that an SSE
subscriber in another process can measure delivery latency on the same wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import random
import resource
import sys
import time
from typing import Any

import httpx


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _sender(
    client: httpx.AsyncClient,
    token: str,
    recipients: list[str],
    pick: random.Random | None,
    end: float,
    stats: dict[str, Any],
    latencies: list[float],
) -> None:
    """Send until ``end``: always to ``recipients[0]``, or with ``pick`` to any of them."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    prefixes = [
        f'{{"to":"{recipient}","kind":"notice","subject":"bench","body":"load",'
        for recipient in recipients
    ]
    while time.monotonic() < end:
        start = time.perf_counter()
        prefix = prefixes[0] if pick is None else pick.choice(prefixes)
        content = f'{prefix}"payload":{{"t_ns":{time.time_ns()}}}}}'
        try:
            resp = await client.post("/v1/mail", content=content, headers=headers)
        except httpx.HTTPError as exc:
            stats["errors"] += 1
            stats["last_error"] = f"{type(exc).__name__}: {exc}"
            continue
        if resp.status_code == 201:
            stats["ok"] += 1
            latencies.append(time.perf_counter() - start)
        else:
            stats["errors"] += 1
            stats["last_error"] = f"HTTP {resp.status_code}: {resp.text[:200]}"
        stats["last_done"] = time.monotonic()


async def run(job: dict[str, Any]) -> dict[str, Any]:
    concurrency = int(job["concurrency"])
    senders: list[str] = job["sender_tokens"]
    recipients: list[str] = job["recipients"]
    # With a ``seed`` (the load process's number) the processes use different senders, and each
    # request goes to any recipient; without one, request task i sends to recipient i always.
    seed = job.get("seed")
    offset = 0 if seed is None else int(seed) * concurrency
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    stats: dict[str, Any] = {"ok": 0, "errors": 0, "last_error": None, "last_done": 0.0}
    latencies: list[float] = []
    async with httpx.AsyncClient(
        base_url=job["url"],
        limits=limits,
        timeout=float(job["grace"]),  # bounds the run at duration + grace
        http1=True,
        http2=False,
    ) as client:
        # Open the keep-alive connections before the clock starts.
        await asyncio.gather(*(client.get("/healthz") for _ in range(concurrency)))
        delay = float(job["start_at"]) - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        began = time.monotonic()
        began_wall = time.time()
        cpu_began = _cpu_seconds()
        end = began + float(job["duration"])
        await asyncio.gather(
            *(
                _sender(
                    client,
                    senders[(offset + i) % len(senders)],
                    recipients if seed is not None else [recipients[i % len(recipients)]],
                    None if seed is None else random.Random(offset + i),
                    end,
                    stats,
                    latencies,
                )
                for i in range(concurrency)
            )
        )
    latencies.sort()
    n = len(latencies)
    return {
        "began_wall": began_wall,
        "ended_wall": began_wall + max(stats["last_done"], end) - began,
        "cpu_s": _cpu_seconds() - cpu_began,
        "ok": stats["ok"],
        "errors": stats["errors"],
        "last_error": stats["last_error"],
        "elapsed_s": max(stats["last_done"], end) - began,
        "req_p50_ms": latencies[n // 2] * 1000 if n else None,
        "req_p99_ms": latencies[min(n - 1, n * 99 // 100)] * 1000 if n else None,
    }


def main() -> None:
    job = json.loads(sys.stdin.read())
    if job.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(job["cpus"]))
    with contextlib.suppress(KeyboardInterrupt):
        if importlib.util.find_spec("uvloop") is not None:
            import uvloop

            result = uvloop.run(run(job))
        else:
            result = asyncio.run(run(job))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
