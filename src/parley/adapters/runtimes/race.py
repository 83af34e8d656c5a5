"""The failure rules every runtime obeys (W9), written once.

A provider call runs as its own task and races the turn's deadline and cancel signal. The lesson
behind it: sending an abort is not enough — a provider that ignores it would leave ``await``
hanging forever, so the race is explicit and a timeout wins whatever the provider does. And a
failure is never silence: an error, a non-completed stop or an empty reply raises
:class:`RuntimeFailure`, because a meeting gone quiet from failing models looks like agreement.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from parley.core.errors import FailureReason, RuntimeFailure
from parley.core.redact import scrub, secret_values
from parley.core.runtime import Turn, TurnResult, Usage

log = logging.getLogger(__name__)

ABANDON_GRACE_S = 1.0
"""How long a cancelled provider call may take to clean up before we stop waiting for it."""

# Provider tasks that ignored cancellation: kept referenced so they are not garbage-collected
# mid-flight, and their eventual exception is retrieved instead of logged as never retrieved.
_abandoned: set[asyncio.Task[Any]] = set()


@dataclass(frozen=True)
class ProviderReply:
    """What a provider call produced, before the shared rules judge it."""

    text: str
    usage: Usage = field(default_factory=Usage)
    runtime_state: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Facts the provider measured or noticed (e.g. ``resumed_fresh``), added to the turn's."""


ProviderCall = Callable[[], Awaitable[ProviderReply]]


def deadline_for(turn: Turn, limit_s: float | None) -> float:
    """The time a turn may take: the turn's own timeout, capped by the agent's if it has one."""
    return turn.timeout_s if limit_s is None else min(turn.timeout_s, limit_s)


async def race_turn(
    turn: Turn,
    call: ProviderCall,
    *,
    route: str,
    timeout_s: float | None = None,
    grace_s: float = ABANDON_GRACE_S,
    secrets: Iterable[str] = (),
) -> TurnResult:
    """Run ``call`` under the turn's deadline and cancel signal and judge what it returns.

    Returns a completed, non-empty :class:`TurnResult`; raises :class:`RuntimeFailure` with
    reason ``timeout``, ``cancelled``, ``empty``, or whatever the provider raised, its text
    scrubbed of the agent's secrets and of ``secrets`` (e.g. a key read from the environment).
    """
    started = time.perf_counter()
    hidden = (*secrets,)

    def failure(message: str, reason: FailureReason) -> RuntimeFailure:
        return _annotate(RuntimeFailure(message, reason=reason), turn, route, started, hidden)

    if turn.cancel.is_set():
        raise failure(f"turn {turn.invocation_id!r} was cancelled before it started", "cancelled")
    deadline_s = deadline_for(turn, timeout_s)
    provider: asyncio.Future[ProviderReply] = asyncio.ensure_future(call())
    cancelled: asyncio.Future[Any] = asyncio.ensure_future(turn.cancel.wait())
    try:
        done, _ = await asyncio.wait(
            [provider, cancelled], timeout=deadline_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        cancelled.cancel()
        if not provider.done():
            provider.cancel()
            await _settle(provider, grace_s)

    # Judge by what finished inside the race: a cancel arriving while an overdue call is being
    # wound down does not turn its timeout into a cancellation.
    if cancelled in done:
        raise failure(
            f"turn {turn.invocation_id!r} was cancelled while {route} answered", "cancelled"
        )
    if provider not in done:
        raise failure(
            f"{route} did not answer within {deadline_s:g} s; "
            "raise the turn timeout or check the provider",
            "timeout",
        )
    if provider.cancelled():
        raise failure(f"the call to {route} was cancelled from inside", "error")
    try:
        reply = provider.result()
    except RuntimeFailure as exc:
        _annotate(exc, turn, route, started, hidden)
        raise
    except Exception as exc:
        raise failure(f"{route} failed: {type(exc).__name__}: {exc}", "error") from exc
    if not reply.text.strip():
        empty = failure(f"{route} returned an empty reply; an empty reply is not silence", "empty")
        raise empty.charged(reply.usage)
    return TurnResult(
        text=reply.text,
        stop_reason="completed",
        usage=reply.usage,
        model_route=route,
        timings={**reply.timings, **_timings(started)},
        runtime_state=reply.runtime_state,
    )


async def _settle(task: asyncio.Future[ProviderReply], grace_s: float) -> None:
    """Give a cancelled provider call a bounded moment to release what it holds, then move on."""
    done, _ = await asyncio.wait({task}, timeout=grace_s)
    if done:
        _retrieve(task)
        return
    log.warning("a provider call ignored cancellation; abandoning it")
    if isinstance(task, asyncio.Task):
        _abandoned.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Future[Any]) -> None:
    if isinstance(task, asyncio.Task):
        _abandoned.discard(task)
    _retrieve(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _timings(started: float) -> dict[str, float]:
    return {"provider_wait_ms": round((time.perf_counter() - started) * 1000, 3)}


def _annotate(
    exc: RuntimeFailure, turn: Turn, route: str, started: float, secrets: tuple[str, ...]
) -> RuntimeFailure:
    """Add the trace facts (C13) to a failure so the hub can record it like a success, and
    scrub its text: a provider may echo the key it was sent, a command may print its env."""
    exc.details.setdefault("model_route", route)
    exc.details.setdefault("invocation_id", turn.invocation_id)
    exc.details.setdefault("agent_id", turn.agent.id)
    exc.details["timings"] = _timings(started)
    scrub_failure(exc, {*secret_values(turn.agent.runtime), *secrets})
    return exc


def scrub_failure(exc: RuntimeFailure, secrets: Iterable[str]) -> None:
    """Remove ``secrets`` and credential-shaped text from a failure's message and details."""
    hidden = tuple(secrets)
    exc.message = scrub(exc.message, hidden)
    exc.args = (exc.message,)
    for key, value in exc.details.items():
        if isinstance(value, str):
            exc.details[key] = scrub(value, hidden)
