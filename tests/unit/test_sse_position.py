"""Where an SSE stream stands (``sse._Position``): items are never sent twice, and with ids that
are not in commit order (event ULIDs of several hubs) a late item is still sent."""

from __future__ import annotations

from parley.surfaces.rest.sse import SseItem, _Position


def item(item_id: str) -> SseItem:
    return SseItem(item_id, "event", {})


def test_a_seq_stream_skips_what_it_already_passed() -> None:
    pos = _Position(None, int, None, late_ids=False)
    assert [pos.admit(item(i), live=True) for i in ("1", "2", "2", "1", "3")] == [
        True,
        True,
        False,
        False,
        True,
    ]
    assert pos.last == "3"


def test_a_late_id_from_another_hub_is_sent_once() -> None:
    pos = _Position(None, str, None, late_ids=True)
    # B's event (made later, id 02) commits before A's (made earlier, id 01).
    got = [pos.admit(item(i), live=True) for i in ("02", "01", "02", "01", "03")]
    assert got == [True, True, False, False, True]
    assert pos.last == "03"  # a resume reads after the newest id sent


def test_a_backfill_page_still_starts_after_the_last_id() -> None:
    pos = _Position("05", str, None, late_ids=True)
    assert [pos.admit(item(i), live=False) for i in ("04", "05", "06")] == [False, False, True]
