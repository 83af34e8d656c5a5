"""The sliding window of per-sender quotas (service/quotas.py) on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from parley.config import Settings
from parley.core.errors import RateLimited
from parley.core.identity import Principal
from parley.service.quotas import SendQuotas
from parley.testing import FakeClock


def agent(agent_id: str) -> Principal:
    return Principal(id=agent_id, kind="agent", display_name=agent_id, created=datetime.now(UTC))


@pytest.fixture
def quotas() -> tuple[SendQuotas, FakeClock]:
    clock = FakeClock()
    settings = Settings(send_rate_per_minute=2, send_bytes_per_minute=1000)
    return SendQuotas(clock, settings), clock


def test_a_job_run_again_replaces_its_charge(quotas: tuple[SendQuotas, FakeClock]) -> None:
    q, _ = quotas
    ticket = q.ticket(agent("a"))
    # The store runs a job again when a neighbour in its batch failed: one send, one charge.
    for _ in range(5):
        ticket.charge(messages=1, nbytes=100)
    q.ticket(agent("a")).charge(messages=1, nbytes=100)
    with pytest.raises(RateLimited):
        q.ticket(agent("a")).charge(messages=1, nbytes=100)


def test_a_refund_frees_the_quota_and_senders_are_apart(
    quotas: tuple[SendQuotas, FakeClock],
) -> None:
    q, _ = quotas
    first = q.ticket(agent("a"))
    first.charge(messages=1, nbytes=900)
    with pytest.raises(RateLimited) as refused:
        q.ticket(agent("a")).charge(messages=1, nbytes=200)
    assert "1,000 bytes a minute" in refused.value.message
    q.ticket(agent("b")).charge(messages=1, nbytes=900)
    first.refund()
    q.ticket(agent("a")).charge(messages=1, nbytes=200)


def test_the_window_slides_with_the_clock(quotas: tuple[SendQuotas, FakeClock]) -> None:
    q, clock = quotas
    q.ticket(agent("a")).charge(messages=1, nbytes=1)
    clock.advance(30)
    q.ticket(agent("a")).charge(messages=1, nbytes=1)
    with pytest.raises(RateLimited) as refused:
        q.ticket(agent("a")).charge(messages=1, nbytes=1)
    assert refused.value.retry_after == 30
    clock.advance(30)
    q.ticket(agent("a")).charge(messages=1, nbytes=1)


def test_a_refund_after_the_charge_aged_out_changes_nothing(
    quotas: tuple[SendQuotas, FakeClock],
) -> None:
    q, clock = quotas
    late = q.ticket(agent("a"))
    late.charge(messages=1, nbytes=1)
    clock.advance(61)
    q.ticket(agent("a")).charge(messages=1, nbytes=1)
    late.refund()  # its minute is over: it no longer counted, so it frees nothing
    q.ticket(agent("a")).charge(messages=1, nbytes=1)
    with pytest.raises(RateLimited):
        q.ticket(agent("a")).charge(messages=1, nbytes=1)


def test_without_quotas_nothing_is_kept_per_send() -> None:
    # A hub with the quotas off remembers no charges: a busy minute would otherwise hold one
    # record per send for the garbage collector to scan.
    q = SendQuotas(FakeClock(), Settings(send_rate_per_minute=0, send_bytes_per_minute=0))
    for _ in range(100):
        q.ticket(agent("a")).charge(messages=1, nbytes=10**6)
    assert all(not window.charges for window in q._windows.values())
