"""Names and id prefixes: which one a reference addresses, and ids short enough to read."""

from __future__ import annotations

import pytest

from parley.core.errors import Conflict
from parley.core.names import Named, choose, short_ids


def test_a_name_wins_over_an_id_prefix_and_a_closed_namesake_gives_way() -> None:
    design = Named("01AAAA", "design")
    assert choose("design", "channel", [design], [Named("01BBBB", "x")]) == "01AAAA"
    closed = Named("01CCCC", "design", live=False)
    assert choose("design", "channel", [design, closed], []) == "01AAAA"
    assert choose("01BB", "channel", [], [Named("01BBBB", "x")]) == "01BBBB"
    assert choose("01B", "channel", [], [Named("01BBBB", "x")]) is None  # too short
    assert choose("nothing", "channel", [], []) is None


def test_a_reference_several_fit_is_refused_with_the_candidates() -> None:
    with pytest.raises(Conflict) as refused:
        choose("dup", "channel", [Named("01A", "dup"), Named("01B", "dup")], [])
    assert refused.value.code == "ambiguous_channel"
    assert [c["id"] for c in refused.value.details["candidates"]] == ["01A", "01B"]
    with pytest.raises(Conflict) as by_prefix:
        choose("room-01", "room", [], [Named("room-01A", "a"), Named("room-01B", "b")])
    assert by_prefix.value.code == "ambiguous_room"


def test_short_ids_are_as_long_as_the_list_needs() -> None:
    ids = ["01M9000000AAAA", "01M9000000AAAB", "01N8000000ZZZZ"]
    short = short_ids(ids)
    assert short == {
        "01M9000000AAAA": "01M9000000AAAA",
        "01M9000000AAAB": "01M9000000AAAB",
        "01N8000000ZZZZ": "01N80000",
    }
    assert short_ids(["01M9000000AAAA"]) == {"01M9000000AAAA": "01M90000"}
