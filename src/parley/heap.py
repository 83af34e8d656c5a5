"""A started process's heap: what a hub has loaded at start-up lives as long as the process."""

from __future__ import annotations

import gc

SETTLES_WHEN_WARM = 3
"""How many of a server's first full collections are followed by another freeze."""


def settle_heap() -> None:
    """Move what a started hub has loaded (modules, the app, the hub) out of the garbage
    collector's full passes: it lives as long as the process, and scanning it again and again
    paused a busy hub for ~150 ms at a time (measured by bench/mail.py).

    What the first requests import lazily (routers' schemas, the MCP SDK, the web UI's
    templates) arrives after this freeze and made later full passes grow run by run (13 to
    117 ms). So the first few full collections are each followed by a freeze too: right after
    one, what is left is alive, and it is the warm server. Only a few: a frozen object is never
    collected, and a request's garbage frozen while still alive would be kept for good."""
    gc.collect()
    gc.freeze()
    _warm.left = SETTLES_WHEN_WARM
    if _warm.settle not in gc.callbacks:
        gc.callbacks.append(_warm.settle)


class _WarmSettles:
    """The freezes after a server's first full collections (one callback per process)."""

    left = 0

    def settle(self, phase: str, info: dict[str, int]) -> None:
        if self.left and phase == "stop" and info["generation"] == 2:
            self.left -= 1
            gc.freeze()


_warm = _WarmSettles()
