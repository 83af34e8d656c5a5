"""Time: UTC wall clock for timestamps, monotonic clock for durations."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


def as_utc(dt: datetime) -> datetime:
    """``dt`` in UTC; a time without an offset is taken as UTC (the hub's time). A time at the
    edge of the calendar whose offset takes it past year 1 or 9999 in UTC becomes the first or
    last time there is: as a bound of a time filter it means just the same (nothing stored lies
    beyond), and a filter is no reason to fail."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        edge = datetime.min if dt.year == datetime.min.year else datetime.max
        return edge.replace(tzinfo=UTC)


def iso(dt: datetime | None) -> str | None:
    """Format a UTC timestamp as ISO-8601 with a ``Z`` suffix."""
    if dt is None:
        return None
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


UtcTime = Annotated[datetime, AfterValidator(as_utc)]
"""A time a filter compares with stored times, which are UTC: taken in UTC (``as_utc``)."""
