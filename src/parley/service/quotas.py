"""Per-sender quotas: how many messages and bytes one sender may store a minute (mail, every copy
counted, and channel posts). Each hub process keeps its own sliding window over the hub clock, in
memory; the operator and the hub itself are not limited.

A send is charged inside its write job, once it knows how many copies it stores, and refunded if
the job does not commit. A job the store runs again (after a neighbour in its batch failed)
replaces its earlier charge instead of adding to it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from parley.config import Settings
from parley.core.errors import RateLimited, TooLarge
from parley.core.identity import Principal
from parley.core.ports import Clock

WINDOW_S = 60.0


@dataclass(eq=False)
class _Charge:
    at: float
    messages: int
    nbytes: int
    refunded: bool = False


class _Window:
    """What one sender stored within the last minute."""

    def __init__(self) -> None:
        self.charges: deque[_Charge] = deque()
        self.messages = 0
        self.nbytes = 0

    def forget_before(self, start: float) -> None:
        while self.charges and self.charges[0].at <= start:
            self._remove(self.charges.popleft())

    def add(self, charge: _Charge) -> None:
        self.charges.append(charge)
        self.messages += charge.messages
        self.nbytes += charge.nbytes

    def refund(self, charge: _Charge) -> None:
        # A refunded charge stays in the deque until it ages out; it no longer counts.
        self._remove(charge)

    def _remove(self, charge: _Charge) -> None:
        if not charge.refunded:
            self.messages -= charge.messages
            self.nbytes -= charge.nbytes
            charge.refunded = True


class Ticket:
    """One send's charge against its sender's quota."""

    def __init__(self, quotas: SendQuotas | None, sender_id: str) -> None:
        self._quotas = quotas
        self._sender_id = sender_id
        self._charge: _Charge | None = None

    def charge(self, messages: int, nbytes: int) -> None:
        """Charge the send (replacing any earlier charge of this ticket), or raise
        ``RateLimited`` if the sender's quota for the last minute does not allow it."""
        self.refund()
        if self._quotas is not None:
            self._charge = self._quotas.charge(self._sender_id, messages, nbytes)

    def refund(self) -> None:
        """Give the charge back: the send was not stored."""
        if self._quotas is not None and self._charge is not None:
            self._quotas.window(self._sender_id).refund(self._charge)
        self._charge = None


class SendQuotas:
    """The quotas of every sender in this hub process."""

    def __init__(self, clock: Clock, settings: Settings) -> None:
        self.clock = clock
        self.settings = settings
        self._windows: dict[str, _Window] = {}

    def ticket(self, sender: Principal) -> Ticket:
        """A ticket to charge one send of ``sender`` with; the operator's is never refused."""
        return Ticket(None if sender.is_operator else self, sender.id)

    def window(self, sender_id: str) -> _Window:
        return self._windows.setdefault(sender_id, _Window())

    def charge(self, sender_id: str, messages: int, nbytes: int) -> _Charge:
        rate = self.settings.send_rate_per_minute
        budget = self.settings.send_bytes_per_minute
        if budget and nbytes > budget:
            raise TooLarge(
                f"this send stores {nbytes:,} bytes (every recipient's copy counted), more than "
                f"{sender_id!r} may store in a minute ({budget:,} bytes); send it to fewer "
                "recipients or put its content in a file and send the path",
                code="send_over_quota",
                limit=budget,
                size=nbytes,
            )
        now = self.clock.monotonic()
        window = self.window(sender_id)
        window.forget_before(now - WINDOW_S)
        over_rate = rate > 0 and window.messages + messages > rate
        over_bytes = budget > 0 and window.nbytes + nbytes > budget
        if over_rate or over_bytes:
            wait = self._wait(window, now, messages, nbytes)
            limit = f"{rate} messages" if over_rate else f"{budget:,} bytes"
            raise RateLimited(
                f"{sender_id!r} has stored {window.messages} messages ({window.nbytes:,} bytes) "
                f"in the last minute; the limit is {limit} a minute. Retry in {wait:.1f}s",
                code="quota_exceeded",
                retry_after=round(wait, 3),
                limit_messages=rate,
                limit_bytes=budget,
            )
        charge = _Charge(now, messages, nbytes)
        window.add(charge)
        return charge

    def _wait(self, window: _Window, now: float, messages: int, nbytes: int) -> float:
        """Seconds until enough of the window has aged out for this send to fit."""
        rate = self.settings.send_rate_per_minute
        budget = self.settings.send_bytes_per_minute
        held_messages, held_bytes = window.messages, window.nbytes
        for charge in window.charges:
            if charge.refunded:
                continue
            held_messages -= charge.messages
            held_bytes -= charge.nbytes
            fits = (not rate or held_messages + messages <= rate) and (
                not budget or held_bytes + nbytes <= budget
            )
            if fits:
                return max(0.0, charge.at + WINDOW_S - now)
        return WINDOW_S
