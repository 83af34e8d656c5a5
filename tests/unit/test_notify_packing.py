"""A PostgreSQL transaction's notifications are joined into as few payloads as fit
(``postgres_bulk.pack_notifications``): nothing lost, reordered or moved between channels, and no
payload at PostgreSQL's limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from parley.adapters.store.postgres_bulk import (
    NOTIFY_MAX_BYTES,
    NOTIFY_SEPARATOR,
    pack_notifications,
)

# Any text PostgreSQL accepts in a payload (no NUL, valid UTF-8) but the separator.
payloads = st.text(
    alphabet=st.characters(
        blacklist_characters=NOTIFY_SEPARATOR + "\x00", blacklist_categories=("Cs",)
    ),
    max_size=3_000,
).filter(lambda p: len(p.encode()) < NOTIFY_MAX_BYTES)
notifications = st.lists(st.tuples(st.sampled_from(["a", "b"]), payloads), max_size=40)


@given(notifications)
def test_packing_keeps_every_payload_in_its_order_and_channel(
    sent: list[tuple[str, str]],
) -> None:
    packed = pack_notifications(sent)
    unpacked = [
        (channel, entry) for channel, joined in packed for entry in joined.split(NOTIFY_SEPARATOR)
    ]
    assert unpacked == sent
    assert all(len(joined.encode()) < NOTIFY_MAX_BYTES for _, joined in packed)


def test_small_payloads_of_one_channel_become_one_notification() -> None:
    sent = [("c", f"entry {n}") for n in range(100)]
    assert len(pack_notifications(sent)) == 1
    assert len(pack_notifications([("c", "x"), ("d", "y"), ("c", "z")])) == 3
