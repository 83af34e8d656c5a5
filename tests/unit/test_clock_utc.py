"""Times given as filter bounds are compared in UTC, at the calendar's edges too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from parley.core.clock import as_utc


def test_a_time_with_an_offset_is_the_same_instant_in_utc() -> None:
    at = datetime(2026, 12, 4, 20, 0, tzinfo=timezone(timedelta(hours=2)))
    assert as_utc(at) == datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
    assert as_utc(at).utcoffset() == timedelta(0)


def test_a_time_without_an_offset_is_taken_as_utc() -> None:
    assert as_utc(datetime(2026, 12, 4, 18, 0)) == datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


def test_a_time_past_the_calendar_in_utc_is_its_edge_not_a_failure() -> None:
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-14)))
    assert as_utc(early) == datetime.min.replace(tzinfo=UTC)
    assert as_utc(late) == datetime.max.replace(tzinfo=UTC)
