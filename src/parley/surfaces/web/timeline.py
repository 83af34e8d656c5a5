"""A task's turns on a time axis (the trace page): each recorded runtime call is a bar from when
it was ready to run to when its effect committed, split into the parts its invocation record
timed: queue, prompt build, provider wait, tool calls (run by the hub during the provider wait)
and commit. Plain numbers for the template, which draws them as SVG rectangles (the UI's
Content-Security-Policy allows no inline style)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol


class Timed(Protocol):
    """A recorded turn: a task's invocation or a meeting's speech."""

    @property
    def created(self) -> datetime: ...

    @property
    def timings(self) -> dict[str, float] | None: ...


PARTS = (
    ("queue", "queue"),
    ("prompt", "prompt build"),
    ("provider", "provider wait"),
    ("tools", "tool calls"),
    ("commit", "commit"),
)
"""Each part's CSS name and its words, in the order a turn goes through them."""


@dataclass(frozen=True)
class Part:
    name: str
    words: str
    ms: float
    x: float  # where it starts on the axis, 0 to 100
    w: float  # its length on the axis


@dataclass(frozen=True)
class Bar:
    invocation: Timed
    total_ms: float
    parts: list[Part]


def _parts_ms(timings: dict[str, float] | None) -> dict[str, float]:
    timings = timings or {}
    tools = max(0.0, timings.get("tool_calls_ms", 0.0))
    provider = max(0.0, timings.get("provider_wait_ms", 0.0))
    return {
        "queue": max(0.0, timings.get("queue_ms", 0.0)),
        "prompt": max(0.0, timings.get("prompt_build_ms", 0.0)),
        "provider": max(0.0, provider - tools),
        "tools": min(tools, provider) if provider else tools,
        "commit": max(0.0, timings.get("persist_ms", 0.0)),
    }


def bars(invocations: Sequence[Timed]) -> tuple[list[Bar], float]:
    """One bar per invocation on a shared axis, and the axis's length in ms. An invocation is
    recorded when it commits: it started its total before that."""
    spans = []
    for inv in invocations:
        parts = _parts_ms(inv.timings)
        total = sum(parts.values())
        start = inv.created - timedelta(milliseconds=total)
        spans.append((inv, parts, total, start))
    if not spans:
        return [], 0.0
    origin = min(s[3] for s in spans)
    end = max(s[0].created for s in spans)
    axis_ms = max((end - origin).total_seconds() * 1000, 1.0)
    found = []
    for inv, parts, total, start in spans:
        x = min(max((start - origin).total_seconds() * 1000 / axis_ms * 100, 0.0), 100.0)
        drawn = []
        for name, words in PARTS:
            w = parts[name] / axis_ms * 100
            drawn.append(Part(name, words, parts[name], round(x, 3), round(w, 3)))
            x += w
        found.append(Bar(invocation=inv, total_ms=total, parts=drawn))
    return found, axis_ms
