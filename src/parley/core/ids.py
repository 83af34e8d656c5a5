"""ULID generation: time-ordered, sortable ids, monotonic within one process."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


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
        return _encode(now, 10) + _encode(_last_rand & ((1 << 80) - 1), 16)


def new_id(prefix: str = "") -> str:
    """Return a ULID, optionally prefixed (``vs-`` for sessions)."""
    return f"{prefix}{new_ulid()}"
