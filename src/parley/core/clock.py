"""Time: UTC wall clock for timestamps, monotonic clock for durations."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


def iso(dt: datetime | None) -> str | None:
    """Format a UTC timestamp as ISO-8601 with a ``Z`` suffix."""
    if dt is None:
        return None
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")
