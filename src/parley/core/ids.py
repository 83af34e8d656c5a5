"""ULID generation: time-ordered, sortable ids, monotonic within one process."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two characters (10 bits) per lookup: an id is made for every message, event and call.
_PAIRS = [first + second for first in _ALPHABET for second in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def _encode(ms: int, rand: int) -> str:
    """The 26 characters of a ULID: 48 bits of time, then 80 of randomness, as a 130-bit
    number (two leading zero bits) in Crockford's base32."""
    value = (ms << 80) | rand
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def new_ulid() -> str:
    """Return a new ULID string.

    Within a millisecond the random part is incremented, so ids made by one process sort in the
    order they were made (the python-ulid package draws fresh randomness every time, which would
    let two ids of the same millisecond sort backwards).
    """
    global _last_ms, _last_rand
    with _lock:
        now = time.time_ns() // 1_000_000
        if now <= _last_ms:
            now = _last_ms
            _last_rand += 1
        else:
            _last_ms = now
            _last_rand = int.from_bytes(os.urandom(10), "big") >> 1
        return _encode(now & ((1 << 48) - 1), _last_rand & ((1 << 80) - 1))


def new_id(prefix: str = "") -> str:
    """Return a ULID, optionally prefixed (``vs-`` for sessions)."""
    return f"{prefix}{new_ulid()}"
