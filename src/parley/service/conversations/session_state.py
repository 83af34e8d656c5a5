"""A runtime's own session (a Claude Code session id, a Codex thread id) kept on the logical
session from the moment the runtime names it (W1 RuntimeSubSession).

A CLI names its session at the start of a turn (Claude Code's ``system``/``init`` event, Codex's
``thread.started``) and again in the turn's result. Kept only with the result, a first turn cut
by a takeover, a cancel or the hub stopping leaves nothing, and the next turn starts a new
session that knows nothing of what the cut one did. So each turn gets a :class:`StateKeeper`:
the runtime reports through ``Turn.report_state`` while the turn runs, the result's state goes
through the same keeper, and each new value is written once, in the order reported, by one
writer per turn; the turn settles it before its outcome is recorded, however the turn ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("parley.tasks")

SaveState = Callable[[dict[str, Any]], Awaitable[None]]


class StateKeeper:
    """The runtime state of one turn's logical session: what is stored, what was reported last,
    and the background write that brings the one to the other."""

    def __init__(self, stored: dict[str, Any], save: SaveState) -> None:
        self._save = save
        self._stored = dict(stored)
        self._wanted = self._stored
        self._writer: asyncio.Task[None] | None = None
        self._settled = False

    def report(self, state: dict[str, Any]) -> None:
        """Keep ``state`` (the whole state) for the session; written at once, in the background,
        unless it is what was reported last. Reports after :meth:`settle` are not kept: the
        turn's outcome is recorded by then."""
        if self._settled or state == self._wanted:
            return
        self._wanted = dict(state)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    def settle(self, final: dict[str, Any] | None = None) -> Awaitable[None] | None:
        """Report the turn's last word (``final``, the result's state, if any) and take no
        more reports. Returns what to await until everything reported is stored — shielded, so
        a cancel of the turn does not cut the write — or None when it is stored already (most
        turns: nothing to write, nothing to wait for). A background write that failed is
        retried then, and a failure there raises, as any write of the turn does."""
        if final is not None:
            self.report(final)
        self._settled = True
        idle = self._writer is None or self._writer.done()
        if idle and self._wanted == self._stored:
            return None
        return asyncio.shield(self._flush())

    async def _flush(self) -> None:
        if self._writer is not None:
            await self._writer
        if self._wanted != self._stored:
            await self._store(self._wanted)

    async def _write(self) -> None:
        try:
            while self._wanted != self._stored:
                await self._store(self._wanted)
        except Exception:
            # The turn goes on; settle() tries again with the latest state when it ends.
            log.warning("could not keep the runtime's session id yet", exc_info=True)

    async def _store(self, state: dict[str, Any]) -> None:
        await self._save(state)
        self._stored = state
