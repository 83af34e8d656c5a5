"""Claude Code in bidirectional stream-json mode: its command line, its frames, its output.

``claude -p --input-format stream-json --output-format stream-json --verbose`` reads user
messages as NDJSON frames on stdin and answers each with NDJSON events on stdout: ``system``
(subtype ``init``, with ``session_id``, ``tools`` and ``model``), ``assistant`` messages with
content blocks, ``user`` tool results, and one final ``result`` (``subtype``, ``is_error``,
``result``, ``usage``, ``total_cost_usd``, ``duration_ms``, ``num_turns``). It then waits for
the next frame, so one process can hold a session for many turns (:class:`LiveClaude`). A
``control_request`` of subtype ``interrupt`` ends the running turn with a ``result`` of subtype
``error_during_execution`` and leaves the process ready for the next frame. ``--resume=<id>``
continues a session whose process is gone; an id Claude Code does not know makes it print an
error result ("No conversation found with session ID: …") and exit 1.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from parley.adapters.runtimes.child import ChildProcess, json_event, json_events
from parley.adapters.runtimes.race import ProviderReply
from parley.core.errors import RuntimeFailure
from parley.core.runtime import CancelSignal, TurnInput, Usage

CLAUDE_SESSION_KEY = "claude_session_id"
STALE_SESSION_MARK = "No conversation found with session ID"
"""What Claude Code says when ``--resume`` names a session it does not have."""
_DETAIL_CHARS = 2000

_CLAUDE_STOP_SUBTYPES = frozenset(
    {"error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries"}
)


def claude_code_argv(
    *,
    executable: str = "claude",
    model: str | None = None,
    resume: str | None = None,
    permission_mode: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of Claude Code in bidirectional stream-json mode.

    stream-json output requires ``--verbose``. ``--replay-user-messages`` makes Claude Code
    echo each user frame it takes (with the frame's ``uuid``): a message pushed into a running
    turn is known to be taken before that turn's result is trusted. ``--resume=<session id>``
    binds the id to the flag, so an id can never be read as another flag.
    """
    argv = [
        executable,
        "-p",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--verbose",
        "--replay-user-messages",
    ]
    if model:
        argv += ["--model", model]
    if permission_mode:
        argv += ["--permission-mode", permission_mode]
    argv += list(extra_args)
    if resume:
        argv.append(f"--resume={resume}")
    return argv


def claude_user_frame(text: str, *, uuid: str | None = None) -> bytes:
    """One user message for Claude Code's stream-json input, as an NDJSON line; ``uuid``
    names it, and Claude Code's echo of it (``--replay-user-messages``) carries the name."""
    frame: dict[str, Any] = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }
    if uuid is not None:
        frame["uuid"] = uuid
    return (json.dumps(frame, ensure_ascii=False) + "\n").encode()


def claude_interrupt_frame(request_id: str) -> bytes:
    """The control request that asks Claude Code to stop the running turn; it then ends the
    turn with a ``result`` of subtype ``error_during_execution`` and keeps the session."""
    frame = {
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": "interrupt"},
    }
    return (json.dumps(frame) + "\n").encode()


def claude_state(event: dict[str, Any]) -> dict[str, Any] | None:
    """The runtime state an event names: the ``system``/``init`` event that opens every turn
    carries the session id, kept for ``--resume`` before the turn's result arrives."""
    if event.get("type") == "system" and event.get("subtype") == "init":
        session_id = event.get("session_id")
        if isinstance(session_id, str) and session_id:
            return {CLAUDE_SESSION_KEY: session_id}
    return None


def parse_claude_stream(lines: Iterable[str | bytes]) -> ProviderReply:
    """The reply in Claude Code's stream-json output (see :func:`claude_reply`)."""
    return claude_reply(json_events(lines))


def claude_reply(events: Iterable[dict[str, Any]], *, cost_before: float = 0.0) -> ProviderReply:
    """The final ``result`` event's text, usage and ``session_id`` (kept for ``--resume``).

    ``total_cost_usd`` is the running total of the process: a live process serving many turns
    restates it on every result, so the turn's cost is what it grew by since ``cost_before``.

    Raises :class:`RuntimeFailure` when no ``result`` arrived, or the result is an error
    (``is_error``, or a subtype other than ``success``): a limit reached is a non-completed
    stop (reason ``stop_reason``), anything else reason ``error``. An unknown ``--resume`` id
    is marked ``stale_session`` in the details.
    """
    session_id: str | None = None
    result: dict[str, Any] | None = None
    model = ""
    for event in events:
        session_id = event.get("session_id") or session_id
        if event.get("type") == "result":
            result = event
        elif event.get("type") == "system" and event.get("subtype") == "init":
            model = str(event.get("model") or model)
    if result is None:
        raise RuntimeFailure(
            "Claude Code ended without a result event", reason="error", session_id=session_id
        )
    subtype = str(result.get("subtype", ""))
    if result.get("is_error") or subtype != "success":
        failure = _result_failure(result, subtype, session_id)
        raise failure.charged(claude_usage(result, model, cost_before))
    timings: dict[str, float] = {}
    if isinstance(result.get("duration_ms"), int | float):
        timings["cli_duration_ms"] = float(result["duration_ms"])
    return ProviderReply(
        text=str(result.get("result") or ""),
        usage=claude_usage(result, model, cost_before),
        runtime_state={CLAUDE_SESSION_KEY: session_id} if session_id else None,
        timings=timings,
    )


def claude_spent(events: Iterable[dict[str, Any]], cost_before: float) -> Usage | None:
    """The usage the last ``result`` event among ``events`` states (an interrupted turn's
    result is an error one, and states it too), or None without a result."""
    result: dict[str, Any] | None = None
    model = ""
    for event in events:
        if event.get("type") == "result":
            result = event
        elif event.get("type") == "system" and event.get("subtype") == "init":
            model = str(event.get("model") or model)
    return claude_usage(result, model, cost_before) if result is not None else None


def claude_total_cost(result: dict[str, Any]) -> float:
    """The process's running cost total a ``result`` event states (0 when it states none)."""
    cost = result.get("total_cost_usd")
    return float(cost) if isinstance(cost, int | float) else 0.0


def claude_usage(result: dict[str, Any], model: str, cost_before: float) -> Usage:
    """The turn's usage in a ``result`` event: its tokens, and its cost as the growth of the
    process's running total since ``cost_before``."""
    usage = result.get("usage") or {}
    cost = result.get("total_cost_usd")
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
        model=model,
        cost_usd=max(0.0, float(cost) - cost_before) if isinstance(cost, int | float) else None,
    )


def _result_failure(result: dict[str, Any], subtype: str, session_id: str | None) -> RuntimeFailure:
    errors = [str(e) for e in result.get("errors") or ()]
    detail = str(result.get("result") or "; ".join(errors) or "no detail given")[:_DETAIL_CHARS]
    if subtype in _CLAUDE_STOP_SUBTYPES:
        message = f"Claude Code stopped before finishing the turn ({subtype!r}): {detail}"
    elif subtype == "success":
        # is_error with subtype "success" is how Claude Code reports an API error.
        message = f"Claude Code reported an error: {detail}"
    else:
        message = f"Claude Code reported an error ({subtype!r}): {detail}"
    details: dict[str, Any] = {"session_id": session_id}
    if result.get("api_error_status") is not None:
        details["api_error_status"] = result["api_error_status"]
    if any(STALE_SESSION_MARK in text for text in (detail, *errors)):
        details["stale_session"] = True
    return RuntimeFailure(
        message,
        reason="stop_reason" if subtype in _CLAUDE_STOP_SUBTYPES else "error",
        stop_reason=subtype,
        **details,
    )


def is_stale_session(failure: RuntimeFailure) -> bool:
    """Whether ``failure`` says the ``--resume`` id named a session Claude Code does not have."""
    if failure.details.get("stale_session"):
        return True
    return STALE_SESSION_MARK in str(failure.details.get("stderr_tail") or "")


QUIET_S = 2.0
"""How long a result followed by nothing ends a turn whose pushed message was not echoed."""


class LiveClaude:
    """One Claude Code process holding one logical session across turns: a user frame in on
    stdin per turn, NDJSON events out until the turn's ``result``, and an interrupt that ends
    the running turn while the process and its session go on."""

    def __init__(self, *, resumed_from: str | None, replays: bool = False) -> None:
        self.resumed_from = resumed_from
        """The session id given with ``--resume`` when the process started, if any."""
        self.session_id: str | None = resumed_from
        self.last_used = 0.0
        self.idle_timer: asyncio.TimerHandle | None = None
        self._child: ChildProcess | None = None
        # Events since the last turn ended; an error result printed at start-up (an unknown
        # --resume id) lands here before any frame is sent and answers the first turn.
        self._events: list[dict[str, Any]] = []
        self._result: asyncio.Future[None] | None = None
        self._in_turn = False
        self._report: Callable[[dict[str, Any]], None] | None = None
        # Messages pushed into the running turn that Claude Code has not echoed yet: a result
        # seen before their echo may be followed by a turn that reads them (it queued them).
        self._unacked: set[str] = set()
        self._quiet: asyncio.TimerHandle | None = None
        # The process's running cost total at its last judged result (see ``claude_reply``).
        self._cost_total = 0.0
        self._replays = replays
        """Whether Claude Code echoes the user frames it takes (``--replay-user-messages``)."""
        self._turns = 0
        """How many turns were sent to this process."""
        self._awaiting: str | None = None
        """The uuid of the running turn's own frame until Claude Code echoes it: a result
        before that echo ends a turn Claude Code ran on its own (see :meth:`_turn`)."""

    @classmethod
    async def start(
        cls, argv: Sequence[str], *, resumed_from: str | None, **child: Any
    ) -> LiveClaude:
        """Start Claude Code; ``child`` are the ``cwd``, ``env`` and ``kill_grace_s`` of
        :meth:`ChildProcess.start`."""
        live = cls(resumed_from=resumed_from, replays="--replay-user-messages" in argv)
        live._child = await ChildProcess.start(
            argv, on_line=live._on_line, keep_stdout=False, **child
        )
        return live

    @property
    def child(self) -> ChildProcess:
        assert self._child is not None
        return self._child

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def reusable(self) -> bool:
        """Whether the next turn may be sent to this process: it runs and no turn is open."""
        return self.child.returncode is None and not self._in_turn

    async def turn(
        self,
        text: str,
        cancel: CancelSignal,
        request_id: str,
        report: Callable[[dict[str, Any]], None] | None = None,
        live_input: TurnInput | None = None,
    ) -> ProviderReply:
        """Send one user message and wait for its ``result``, or interrupt it on ``cancel``;
        ``report`` gets the session id as soon as the turn's ``init`` event names it, and
        ``live_input`` is opened for the hub to push more user messages into the running turn
        (mail): the turn's result is the one after Claude Code has taken every one of them.

        Raises :class:`RuntimeFailure`: the result's error, reason ``error`` when the process
        exits first, reason ``cancelled`` (with ``interrupt_ms``, the time Claude Code took to
        stop the turn) when cancelled. A turn left open (the process did not answer the
        interrupt, or the caller was cancelled) makes the process not :attr:`reusable`.
        """
        self._report = report
        try:
            return await self._turn(text, cancel, request_id, live_input)
        finally:
            self._report = None
            if live_input is not None:
                live_input.close()
            self._unacked.clear()
            self._awaiting = None
            self._end_quiet()

    async def _turn(
        self, text: str, cancel: CancelSignal, request_id: str, live_input: TurnInput | None
    ) -> ProviderReply:
        result: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._result = result
        self._in_turn = True
        name = str(uuid.uuid4())
        if self._turns == 0:
            if any(event.get("type") == "result" for event in self._events):
                # An error printed at start-up (an unknown --resume id) answers the first turn.
                result.set_result(None)
        else:
            # A message queued in a turn that was then interrupted (mail pushed just before a
            # cancel or a takeover), or that came after its turn's result, is answered by
            # Claude Code in a turn of its own, after the hub's turn has ended. What it printed
            # since is not this turn's; a result of such a turn still running is told apart by
            # the echo of this turn's frame, which comes after it (``_on_line``).
            self._events = []
            self._awaiting = name if self._replays else None
        self._turns += 1
        await self.child.send(claude_user_frame(text, uuid=name))
        if live_input is not None:
            live_input.open(self._push)
        cancelled = asyncio.ensure_future(cancel.wait())
        waiting: set[asyncio.Future[Any]] = {result, self.child.exited, cancelled}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if not result.done() and self.child.exited.done():
            # The result line may still be in the pipe when the exit is noticed.
            await self.child.drained()
        if result.done():
            return self._judge()
        if self.child.exited.done():
            self._in_turn = False
            raise self.child.explain(
                RuntimeFailure(
                    "Claude Code exited before the turn's result",
                    reason="error",
                    session_id=self.session_id,
                )
            )
        return await self._interrupt(result, request_id)

    async def _interrupt(self, result: asyncio.Future[None], request_id: str) -> ProviderReply:
        sent = time.perf_counter()
        await self.child.send(claude_interrupt_frame(request_id))
        grace_s = self.child.kill_grace_s
        answered: set[asyncio.Future[Any]] = {result, self.child.exited}
        await asyncio.wait(answered, timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
        if not result.done():
            # Still mid-turn: the caller stops the process (not reusable) and the session is
            # resumed by id on the next turn.
            raise RuntimeFailure(
                f"the turn was cancelled and Claude Code did not answer the interrupt within "
                f"{grace_s:g} s; its process is stopped",
                reason="cancelled",
                interrupt_answered=False,
                session_id=self.session_id,
            )
        interrupt_ms = round((time.perf_counter() - sent) * 1000, 3)
        stopped = RuntimeFailure(
            f"the turn was cancelled; Claude Code stopped it after {interrupt_ms:g} ms and "
            "keeps the session for the next turn",
            reason="cancelled",
            interrupt_answered=True,
            interrupt_ms=interrupt_ms,
            session_id=self.session_id,
        )
        # The interrupted turn's result states what it used: booked to it, not to the next.
        raise self._charge(stopped, claude_spent(self._take_events(), self._cost_total))

    def _judge(self) -> ProviderReply:
        events = self._take_events()
        try:
            reply = claude_reply(events, cost_before=self._cost_total)
            self._cost_total += reply.usage.cost_usd or 0.0
            return reply
        except RuntimeFailure as exc:
            self._charge(exc, exc.usage)
            self.child.explain(exc)
            raise

    def _charge(self, failure: RuntimeFailure, usage: Usage | None) -> RuntimeFailure:
        """Book ``usage`` to the failed turn, and count its cost in the process's total so the
        next turn's cost is only its own."""
        if usage is not None:
            failure.charged(usage)
            self._cost_total += usage.cost_usd or 0.0
        return failure

    def _take_events(self) -> list[dict[str, Any]]:
        events, self._events = self._events, []
        self._result = None
        self._in_turn = False
        return events

    async def _push(self, text: str) -> bool:
        """Send a user message into the running turn (the hub's mail); whether it went in."""
        result = self._result
        if (
            not self._in_turn
            or result is None
            or result.done()
            or self._quiet is not None
            or self.child.returncode is not None
        ):
            return False  # the turn has its answer: the message is for the next turn
        name = str(uuid.uuid4())
        self._unacked.add(name)
        await self.child.send(claude_user_frame(text, uuid=name))
        return True

    def _on_line(self, line: bytes) -> None:
        event = json_event(line)
        if event is None or event.get("type") in ("control_response", "control_request"):
            return
        self.session_id = event.get("session_id") or self.session_id
        self._events.append(event)
        state = claude_state(event)
        if state is not None and self._report is not None:
            self._report(state)
        kind = event.get("type")
        if kind == "user" and event.get("isReplay"):
            echoed = str(event.get("uuid"))
            self._unacked.discard(echoed)
            if echoed == self._awaiting:
                self._awaiting = None
                self._drop_turns_of_its_own()
        result = self._result
        if result is None or result.done():
            return
        if kind != "result":
            self._end_quiet()  # Claude Code goes on: it took a pushed message after all
            return
        if self._awaiting is not None:
            # This turn's frame is not echoed yet: the result most likely ends a turn Claude
            # Code ran on its own before taking the frame. The echo that follows drops it;
            # should none come (a Claude Code that does not echo), the result is the turn's.
            self._end_quiet()
            self._quiet = asyncio.get_running_loop().call_later(QUIET_S, self._settle, result)
            return
        if self._unacked and event.get("subtype") == "success":
            # A message pushed into the turn is not echoed yet: Claude Code may have queued
            # it for a turn of its own, whose result is the answer. Wait for more, unless the
            # process stays quiet (a Claude Code that does not echo).
            self._end_quiet()
            self._quiet = asyncio.get_running_loop().call_later(QUIET_S, self._settle, result)
            return
        result.set_result(None)

    def _drop_turns_of_its_own(self) -> None:
        """Forget the events up to the last result before the running turn's frame was echoed:
        they are turns Claude Code ran on its own, whose answers are not this turn's. Their
        cost is in the process's running total, so the turn's cost includes it."""
        ends = [i for i, event in enumerate(self._events) if event.get("type") == "result"]
        if ends:
            del self._events[: ends[-1] + 1]

    def _settle(self, result: asyncio.Future[None]) -> None:
        self._quiet = None
        if not result.done():
            result.set_result(None)

    def _end_quiet(self) -> None:
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None

    def cancel_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    async def stop(self) -> None:
        """Stop the process and everything it started (closing stdin first lets it exit)."""
        self.cancel_idle_timer()
        if self._child is not None:
            self._child.close_stdin()
            await self._child.stop()
