"""What the bench scripts share around their measurements: the command line, a hub in the bench
process (a temporary data root, on PostgreSQL a throwaway database), a runtime wrapper that times
each call, figures per backend with their headline summary, and the output: a table for people,
then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hub_server import (
    install_signal_exit,
    machine_description,
    percentile,
    progress,
    set_quiet,
    temp_postgres,
)

if TYPE_CHECKING:
    from parley.core.identity import Principal
    from parley.core.ports import Runtime
    from parley.core.runtime import Turn, TurnResult
    from parley.service.hub import Hub
    from parley.testing import StaticRuntimes

BACKENDS = ("sqlite", "postgres")

# One measurement on a started hub: its figures, by name.
Section = Callable[["Hub", "StaticRuntimes", "Principal", Any], Awaitable[dict[str, Any]]]


# -- the command line ------------------------------------------------------------------------------
def parse_args(
    doc: str | None,
    argv: list[str] | None,
    *,
    both: bool = False,
    counts: Sequence[tuple[str, str]] = (),
) -> argparse.Namespace:
    """``--backend`` (with ``both`` when the bench compares them), ``--quick``, the bench's own
    whole-number options ``counts`` (flag, help; None when not given) and ``--quiet``."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    choices = [*BACKENDS, "both"] if both else list(BACKENDS)
    parser.add_argument("--backend", choices=choices, default="sqlite")
    parser.add_argument("--quick", action="store_true", help="a smaller run (under a minute)")
    for flag, help_text in counts:
        parser.add_argument(flag, type=int, default=None, help=help_text)
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser.parse_args(argv)


def chosen_backends(backend: str) -> tuple[str, ...]:
    return BACKENDS if backend == "both" else (backend,)


def run_main(
    args: argparse.Namespace,
    measure: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
    table: Callable[[dict[str, Any]], str] | None = None,
) -> None:
    """Run ``measure`` and print its figures: the table when there is one, then the JSON line
    last on stdout (progress goes to stderr)."""
    set_quiet(args.quiet)
    install_signal_exit()
    result = asyncio.run(measure())
    if table is not None:
        print(table(result))
    sys.stdout.flush()
    print(json.dumps(result))


# -- figures ---------------------------------------------------------------------------------------
def ms(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def distribution(name: str, samples: list[float]) -> dict[str, Any]:
    """``<name>_p50_ms``, ``_p90_ms``, ``_p99_ms`` and ``_max_ms`` of ``samples``."""
    ordered = sorted(samples)
    return {
        f"{name}_p50_ms": ms(percentile(ordered, 50)),
        f"{name}_p90_ms": ms(percentile(ordered, 90)),
        f"{name}_p99_ms": ms(percentile(ordered, 99)),
        f"{name}_max_ms": ms(ordered[-1] if ordered else None),
    }


def filler(label: str, size: int) -> str:
    """A text of ``size`` characters that starts by saying what it is."""
    return (label + " " + "lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def conditions(load_before: list[float]) -> dict[str, Any]:
    """How busy the machine was before and after the run, and what it is."""
    return {
        "load_avg_before": load_before,
        "load_avg_after": load_average(),
        "machine": machine_description(),
    }


# -- timing runtime calls ------------------------------------------------------------------------
class TimedRuntime:
    """Wraps a runtime to tell ``noted``, per call, the turn and the wall and thread-CPU time at
    entry and at exit (``wall_in, wall_out, cpu_in, cpu_out``)."""

    def __init__(
        self, inner: Runtime, noted: Callable[[Turn, float, float, float, float], None]
    ) -> None:
        self.inner = inner
        self.noted = noted
        self.kind = inner.kind

    async def respond(self, turn: Turn) -> TurnResult:
        wall_in, cpu_in = time.perf_counter(), time.thread_time()
        try:
            return await self.inner.respond(turn)
        finally:
            self.noted(turn, wall_in, time.perf_counter(), cpu_in, time.thread_time())

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- a hub in the bench process --------------------------------------------------------------------
@contextlib.asynccontextmanager
async def database(backend: str, prefix: str) -> AsyncIterator[str | None]:
    """A throwaway PostgreSQL database's URL, or None for SQLite in the data root."""
    if backend == "postgres":
        async with temp_postgres(prefix) as url:
            yield url
    else:
        yield None


@contextlib.asynccontextmanager
async def started_hub(
    backend: str, *, home_prefix: str, database_prefix: str, **settings: Any
) -> AsyncIterator[tuple[Hub, StaticRuntimes, Principal]]:
    """A started hub on a temporary data root, its runtimes (set per agent by the bench) and the
    operator; everything is removed on the way out. ``settings`` are more hub settings."""
    from parley.bootstrap import build_hub
    from parley.config import Settings
    from parley.heap import settle_heap
    from parley.testing import StaticRuntimes

    home = Path(tempfile.mkdtemp(prefix=home_prefix))
    try:
        async with database(backend, database_prefix) as url:
            runtimes = StaticRuntimes()
            # A bench measures the hub's own cost: the per-sender quotas would only add refusals.
            hub = build_hub(
                Settings(
                    home=home,
                    database_url=url,
                    send_rate_per_minute=0,
                    send_bytes_per_minute=0,
                    **settings,
                ),
                runtimes=runtimes,
            )
            await hub.start(background=False)
            # As `parley serve` does once its hub has started (see parley.heap).
            settle_heap()
            try:
                assert hub.operator_token is not None
                operator = await hub.identity.authenticate(hub.operator_token)
                yield hub, runtimes, operator
            finally:
                await hub.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def measure_backend(
    backend: str,
    plan: Any,
    sections: Sequence[Section],
    *,
    home_prefix: str,
    database_prefix: str,
) -> dict[str, Any]:
    """The figures of every section, one after the other on one hub, and ``elapsed_s``."""
    began = time.perf_counter()
    figures: dict[str, Any] = {}
    async with started_hub(backend, home_prefix=home_prefix, database_prefix=database_prefix) as (
        hub,
        runtimes,
        operator,
    ):
        progress(f"backend {backend}")
        for section in sections:
            figures.update(await section(hub, runtimes, operator, plan))
    figures["elapsed_s"] = round(time.perf_counter() - began, 1)
    return figures


async def compare_backends(
    plan: Any,
    sections: Sequence[Section],
    headlines: Sequence[str],
    *,
    per_backend: Sequence[str],
    home_prefix: str,
    database_prefix: str,
    targets: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Measure the ``sections`` on each of ``plan.backends`` (``measure_backend``); the result
    leads with the ``headlines`` (and the ``targets`` met), then names the ``per_backend`` figures
    of each backend, then has them all by backend."""
    load_before = load_average()
    backends: tuple[str, ...] = plan.backends
    by_backend = {
        backend: await measure_backend(
            backend, plan, sections, home_prefix=home_prefix, database_prefix=database_prefix
        )
        for backend in backends
    }
    # The headline figures are SQLite's when it ran (the targets are set on SQLite).
    headline = "sqlite" if "sqlite" in by_backend else backends[0]
    lead = by_backend[headline]
    result: dict[str, Any] = {
        "backend": backends[0] if len(backends) == 1 else "both",
        "quick": plan.quick,
        "headline_backend": headline,
        **{key: lead[key] for key in headlines},
    }
    if targets is not None:
        result["targets_met"] = {
            key: lead[key] is not None and lead[key] < limit for key, limit in targets.items()
        }
    for backend, figures in by_backend.items():
        for key in per_backend:
            result[f"{key.removesuffix('_ms')}_{backend}_ms"] = figures[key]
    result["by_backend"] = by_backend
    return {**result, **conditions(load_before)}


def backend_table(result: dict[str, Any], rows: Sequence[tuple[str, str]]) -> str:
    """The figures as a readable table, one column per backend; a row is (label, key), where a
    dotted key reaches into a nested figure."""
    runs = result["by_backend"]

    def value(figures: dict[str, Any], key: str) -> str:
        found: Any = figures
        for part in key.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if isinstance(found, float):
            return f"{found:,.1f}" if key.endswith("_s") else f"{found:,.3f}"
        return "-" if found is None else f"{found:,}"

    width = max(len(label) for label, _ in rows)
    lines = [f"{'':<{width}}  " + "  ".join(f"{b:>10}" for b in runs)]
    for label, key in rows:
        cells = "  ".join(f"{value(figures, key):>10}" for figures in runs.values())
        lines.append(f"{label:<{width}}  {cells}")
    return "\n".join(lines)
