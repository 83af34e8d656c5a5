"""One live Claude Code process per logical session, kept between turns (W9).

The ``command`` runtime of an agent keeps, for each logical session it serves
(``turn.session_id``), one Claude Code process in stream-json mode. A turn sends one user frame
to it; a cancelled turn is interrupted by a control request and the process stays for the next
turn; a turn that times out, or a process that does not answer the interrupt, is stopped with
everything it started. When there is no process (first turn, hub restart, crash, idle close),
one is started with ``--resume=<session id>`` from the logical session's runtime state, and an
id Claude Code no longer knows is dropped: the turn starts a fresh session once, and says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Literal

from parley.adapters.runtimes.child import start_afresh
from parley.adapters.runtimes.claude_code import LiveClaude, is_stale_session
from parley.adapters.runtimes.race import ProviderReply, race_turn
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Turn, TurnResult


class _NeverCancelled:
    """The cancel signal handed to the shared race: the live path handles the turn's own
    signal itself, because a cancel must interrupt the turn, not abandon the process."""

    def is_set(self) -> bool:
        return False

    async def wait(self) -> Literal[True]:
        await asyncio.get_running_loop().create_future()
        return True  # never reached


class ClaudeSessions:
    """The live Claude Code processes of one agent, keyed by logical session."""

    def __init__(
        self,
        *,
        argv_for: Callable[[str | None, Turn], list[str]],
        env: Callable[[Turn], dict[str, str]],
        cwd: str | None,
        kill_grace_s: float,
        idle_s: float,
        resume_id: Callable[[Turn], str | None],
        route: str,
        timeout_s: float | None,
        clock: Callable[[], float],
    ) -> None:
        self._argv_for = argv_for
        self._env = env
        self._cwd = cwd
        self._kill_grace_s = kill_grace_s
        self._idle_s = idle_s
        self._resume_id = resume_id
        self._route = route
        self._timeout_s = timeout_s
        self._clock = clock
        self._live: dict[str, LiveClaude] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing: set[asyncio.Task[list[str]]] = set()
        self._ending: set[str] = set()
        """Sessions ended while a turn ran on them: their process is stopped when it ends."""
        self._stopping: dict[str, set[LiveClaude]] = {}
        """The processes of each session being stopped: ending a session waits for them."""

    def pid(self, session_id: str) -> int | None:
        """The pid of the live process of ``session_id``, if there is one."""
        live = self._live.get(session_id)
        return live.pid if live is not None else None

    async def respond(self, turn: Turn) -> TurnResult:
        """One turn on the session's live process, under the shared deadline and failure rules."""
        doomed: list[LiveClaude] = []
        try:
            if turn.cancel.is_set():
                # The shared race refuses a turn cancelled before it starts.
                return await race_turn(turn, self._unreachable, route=self._route)
            return await race_turn(
                dataclasses.replace(turn, cancel=_NeverCancelled()),
                lambda: self._call(turn, doomed),
                route=self._route,
                timeout_s=self._timeout_s,
            )
        finally:
            # Processes left mid-turn (timeout, unanswered interrupt, a crash) die here, before
            # the outcome is handed back; they were already taken out of the pool.
            for live in doomed:
                await self._stop(turn.session_id, live)

    async def _unreachable(self) -> ProviderReply:
        raise AssertionError("a turn cancelled before it started is never sent")

    async def _call(self, turn: Turn, doomed: list[LiveClaude]) -> ProviderReply:
        sid = turn.session_id
        lock = self._locks.setdefault(sid, asyncio.Lock())
        # One turn at a time per session: a superseding turn waits for the one being
        # interrupted (bounded by its deadline and the kill grace) and then uses the process.
        async with lock:
            if turn.cancel.is_set():
                raise RuntimeFailure(
                    f"turn {turn.invocation_id!r} was cancelled before it was sent",
                    reason="cancelled",
                )
            live = self._live.pop(sid, None)
            if live is not None:
                live.cancel_idle_timer()
                if not live.reusable:
                    doomed.append(live)
                    live = None
            if live is None:
                live = await self._start(turn, self._resume_id(turn))
            try:
                return await self._turn(turn, live, doomed)
            finally:
                self._keep_or_drop(sid, doomed)

    async def _turn(self, turn: Turn, live: LiveClaude, doomed: list[LiveClaude]) -> ProviderReply:
        # Registered at once, so that whatever ends the turn (a timeout cancels this task) the
        # process is either kept for the next turn or stopped by ``respond``.
        self._live[turn.session_id] = live
        request_id = f"parley-{turn.invocation_id}"
        text = turn.prompt.render()
        try:
            return await live.turn(
                text, turn.cancel, request_id, turn.report_state, turn.live_input
            )
        except RuntimeFailure as exc:
            if live.resumed_from is None or not is_stale_session(exc):
                raise
            stale = live.resumed_from

        # Claude Code no longer has the session (its files were removed, another machine):
        # drop the id and start over once within this turn, so later turns do not fail too.
        async def afresh() -> ProviderReply:
            self._live.pop(turn.session_id, None)
            doomed.append(live)
            fresh = await self._start(turn, None)
            self._live[turn.session_id] = fresh
            return await fresh.turn(
                text, turn.cancel, request_id, turn.report_state, turn.live_input
            )

        return await start_afresh(self._route, stale, afresh)

    async def _start(self, turn: Turn, resume: str | None) -> LiveClaude:
        return await LiveClaude.start(
            self._argv_for(resume, turn),
            resumed_from=resume,
            cwd=self._cwd or turn.agent.workspace,
            env=self._env(turn),
            kill_grace_s=self._kill_grace_s,
        )

    def _keep_or_drop(self, sid: str, doomed: list[LiveClaude]) -> None:
        live = self._live.get(sid)
        ending = sid in self._ending
        self._ending.discard(sid)
        if live is None:
            return
        if ending or not live.reusable:
            del self._live[sid]
            doomed.append(live)
            return
        live.last_used = self._clock()
        self._arm_idle_timer(live)

    def _arm_idle_timer(self, live: LiveClaude) -> None:
        live.cancel_idle_timer()
        delay = max(0.0, live.last_used + self._idle_s - self._clock())
        live.idle_timer = asyncio.get_running_loop().call_later(delay, self._idle_timer_fired, live)

    def _idle_timer_fired(self, live: LiveClaude) -> None:
        # Forgotten first: a timer that fires a little early is armed again by close_idle.
        live.idle_timer = None
        task = asyncio.ensure_future(self.close_idle())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close_idle(self) -> list[str]:
        """Stop the processes unused for ``idle_s`` or longer; return their sessions. The next
        turn of such a session starts a process that resumes it by id."""
        now = self._clock()
        expired: list[tuple[str, LiveClaude]] = []
        closed: list[str] = []
        for sid, live in list(self._live.items()):
            lock = self._locks.get(sid)
            if lock is not None and lock.locked():
                continue  # a turn is running or waiting: not idle
            if now - live.last_used >= self._idle_s:
                del self._live[sid]
                self._locks.pop(sid, None)
                expired.append((sid, live))
                closed.append(sid)
            elif live.idle_timer is None:
                self._arm_idle_timer(live)
        await asyncio.gather(*(self._stop(sid, live) for sid, live in expired))
        return closed

    async def end(self, sid: str) -> None:
        """Stop the process of ``sid`` (its worker ended): at once when no turn runs on it,
        else when the running turn ends, instead of keeping it for a next turn. Returns once
        every stop of the session's processes under way has finished."""
        lock = self._locks.get(sid)
        if lock is not None and lock.locked():
            self._ending.add(sid)
        else:
            live = self._live.pop(sid, None)
            self._locks.pop(sid, None)
            if live is not None:
                await self._stop(sid, live)
        # A stop of the session's process already under way (another end, an idle close, the
        # end of a turn) may have taken it out of the pool first: it ends before this returns.
        for other in list(self._stopping.get(sid, ())):
            await other.stop()

    async def _stop(self, sid: str, live: LiveClaude) -> None:
        """Stop ``live``, a process of ``sid``, known as being stopped until it has ended."""
        stopping = self._stopping.setdefault(sid, set())
        stopping.add(live)
        try:
            await live.stop()
        finally:
            stopping.discard(live)
            if not stopping and self._stopping.get(sid) is stopping:
                del self._stopping[sid]

    async def aclose(self) -> None:
        """Stop every live process."""
        lives = list(self._live.items())
        self._live.clear()
        self._locks.clear()
        await asyncio.gather(*(self._stop(sid, live) for sid, live in lives))
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
