"""Per-sender quotas: how many messages and bytes one sender may store a minute (mail, every copy
counted, and channel posts). Each hub process keeps its own sliding window over the hub clock, in
memory; the operator and the hub itself are not limited.

A send is charged inside its write job, once it knows how many copies it stores, and refunded if
the job does not commit. A job the store runs again (after a neighbour in its batch failed)
replaces its earlier charge instead of adding to it.
"""

from __future__ import annotations

import itertools
from collections import deque

from parley.core.errors import RateLimited, TooLarge
from parley.core.identity import Principal
from parley.core.ports import Clock
from parley.core.settings import HubSettings

WINDOW_S = 60.0


# (at, messages, bytes, number). A plain tuple of numbers: a busy hub holds a minute of charges,
# and tuples of numbers are left out of the garbage collector's passes (objects were not).
_Charge = tuple[float, int, int, int]


class _Window:
    """What one sender stored within the last minute."""

    def __init__(self) -> None:
        self.charges: deque[_Charge] = deque()
        # The numbers of charges still in ``charges`` that were given back.
        self.refunded: set[int] = set()
        self.messages = 0
        self.nbytes = 0

    def forget_before(self, start: float) -> None:
        while self.charges and self.charges[0][0] <= start:
            _at, messages, nbytes, number = self.charges.popleft()
            if number in self.refunded:
                self.refunded.discard(number)
            else:
                self.messages -= messages
                self.nbytes -= nbytes

    def add(self, charge: _Charge) -> None:
        self.charges.append(charge)
        self.messages += charge[1]
        self.nbytes += charge[2]

    def refund(self, charge: _Charge) -> None:
        _at, messages, nbytes, number = charge
        # Charges are numbered in the order they enter: one older than the oldest held has
        # aged out already and no longer counts.
        held = bool(self.charges) and number >= self.charges[0][3]
        if held and number not in self.refunded:
            self.refunded.add(number)
            self.messages -= messages
            self.nbytes -= nbytes


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

    def __init__(self, clock: Clock, settings: HubSettings) -> None:
        self.clock = clock
        self.settings = settings
        self._windows: dict[str, _Window] = {}
        self._numbers = itertools.count()

    def ticket(self, sender: Principal) -> Ticket:
        """A ticket to charge one send of ``sender`` with; the operator's is never refused."""
        return Ticket(None if sender.is_operator else self, sender.id)

    def window(self, sender_id: str) -> _Window:
        return self._windows.setdefault(sender_id, _Window())

    def charge(self, sender_id: str, messages: int, nbytes: int) -> _Charge | None:
        """The charge of a send now, None if no quota is set; raises if it is over one."""
        rate = self.settings.send_rate_per_minute
        budget = self.settings.send_bytes_per_minute
        if not rate and not budget:
            return None
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
        charge = (now, messages, nbytes, next(self._numbers))
        window.add(charge)
        return charge

    def _wait(self, window: _Window, now: float, messages: int, nbytes: int) -> float:
        """Seconds until enough of the window has aged out for this send to fit."""
        rate = self.settings.send_rate_per_minute
        budget = self.settings.send_bytes_per_minute
        held_messages, held_bytes = window.messages, window.nbytes
        for at, charged_messages, charged_bytes, number in window.charges:
            if number in window.refunded:
                continue
            held_messages -= charged_messages
            held_bytes -= charged_bytes
            fits = (not rate or held_messages + messages <= rate) and (
                not budget or held_bytes + nbytes <= budget
            )
            if fits:
                return max(0.0, at + WINDOW_S - now)
        return WINDOW_S
