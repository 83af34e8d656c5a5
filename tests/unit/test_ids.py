"""Ids are ULIDs (Crockford base32, 48 bits of milliseconds then 80 random bits) that sort in
the order one process made them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from parley.core import ids


@given(ms=st.integers(0, 2**48 - 1), rand=st.integers(0, 2**80 - 1))
def test_the_encoding_is_the_ulid_standards(ms: int, rand: int) -> None:
    reference = str(ULID.from_bytes(ms.to_bytes(6, "big") + rand.to_bytes(10, "big")))
    assert ids._encode(ms, rand) == reference


def test_ids_made_one_after_another_sort_in_that_order() -> None:
    made = [ids.new_ulid() for _ in range(5000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert all(len(i) == 26 for i in made)
    assert ULID.from_str(made[0]).milliseconds <= ULID.from_str(made[-1]).milliseconds
