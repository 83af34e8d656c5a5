"""A started server moves what it has loaded out of the garbage collector's full passes, and
does so again after its first full collections, when the lazily imported rest has arrived."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from parley import heap as heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    heap._warm.left = 0
    gc.unfreeze()


def test_the_first_full_collections_after_start_freeze_what_is_alive(unfrozen: None) -> None:
    heap.settle_heap()
    after_start = gc.get_freeze_count()
    loaded_later = [[i] for i in range(1000)]  # what a first request imports, say
    for settle in range(heap.SETTLES_WHEN_WARM):
        gc.collect()
        assert gc.get_freeze_count() >= after_start + len(loaded_later), settle
        loaded_later = [[i] for i in range(1000)]
    # Then no more: a long-running server's garbage must stay collectable.
    frozen = gc.get_freeze_count()
    gc.collect()
    assert gc.get_freeze_count() == frozen
    assert gc.callbacks.count(heap._warm.settle) == 1
