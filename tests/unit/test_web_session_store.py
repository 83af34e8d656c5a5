"""The web UI's session store: idle and absolute expiry, its bounds (in all, per principal, sign-ins
a minute), the ends it reports, one-time codes."""

from __future__ import annotations

import pytest

from parley.core.errors import RateLimited
from parley.surfaces.web.sessions import WebSessions


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_when_idle_too_long_or_too_old() -> None:
    clock = Clock()
    sessions = WebSessions(clock=clock, idle_s=60, max_s=150)
    sid, _ = sessions.open("alice", "digest")
    clock.now += 59
    assert sessions.find(sid) is not None  # and this use keeps it alive
    clock.now += 59
    assert sessions.find(sid) is not None
    clock.now += 61
    assert sessions.find(sid) is None  # idle for 61 s
    sid, _ = sessions.open("alice", "digest")
    for _ in range(3):
        clock.now += 50
        found = sessions.find(sid)
    assert found is None  # 150 s after sign-in, however busy
    assert sessions.find("not-a-session") is None and sessions.find(None) is None


def test_a_full_store_refuses_a_sign_in_and_signs_nobody_out() -> None:
    clock = Clock()
    sessions = WebSessions(clock=clock, max_sessions=2, idle_s=60)
    first, _ = sessions.open("a", "d1")
    clock.now += 30
    second, _ = sessions.open("b", "d2")
    with pytest.raises(RateLimited) as refused:
        sessions.open("c", "d3")
    assert refused.value.code == "ui_sessions_full"
    assert refused.value.retry_after == 30  # when the first session expires
    assert sessions.find(first) is not None and sessions.find(second) is not None
    # Once a session has expired, its place is taken.
    clock.now += 60
    third, _ = sessions.open("c", "d3")
    assert sessions.find(third) is not None and sessions.find(first) is None


def test_a_principal_holding_its_most_sessions_loses_its_own_oldest() -> None:
    sessions = WebSessions(per_principal=2)
    ended: list[tuple[str, str]] = []
    sessions.on_end = lambda session, reason: ended.append((session.principal_id, reason))
    a1, first = sessions.open("a", "d")
    a2, _ = sessions.open("a", "d")
    b1, _ = sessions.open("b", "other")
    a3, _ = sessions.open("a", "d")
    assert ended == [("a", "evicted")]
    assert sessions.find(a1) is None
    assert all(sessions.find(s) is not None for s in (a2, a3, b1))
    assert len(sessions.of("a")) == 2
    assert not sessions.alive(first)


def test_sign_ins_of_a_principal_are_rate_limited() -> None:
    clock = Clock()
    sessions = WebSessions(clock=clock, signins_per_minute=3)
    browser = None
    for _ in range(3):
        browser, _ = sessions.open("a", "d", replacing=browser)
        clock.now += 1
    with pytest.raises(RateLimited) as refused:
        sessions.open("a", "d", replacing=browser)
    assert refused.value.code == "signin_rate_limited"
    assert refused.value.retry_after == 57  # the first sign-in leaves the minute then
    # The refused sign-in ended nothing, and another principal signs in meanwhile.
    assert sessions.find(browser) is not None
    sessions.open("b", "other")
    clock.now += 57
    sessions.open("a", "d", replacing=browser)
    assert sessions.find(browser) is None  # replaced by the new one


def test_every_end_of_a_session_is_told_with_its_reason() -> None:
    clock = Clock()
    sessions = WebSessions(clock=clock, idle_s=60, per_principal=1)
    ended: list[str] = []
    sessions.on_end = lambda session, reason: ended.append(reason)
    one, _ = sessions.open("a", "d")
    sessions.close(one)
    sessions.close(one)  # twice: told once
    two, _ = sessions.open("a", "d")
    sessions.open("a", "d", replacing=two)
    sessions.open("a", "d")  # one session each: the previous one is evicted
    clock.now += 60
    assert sessions.sweep() == 1
    late, session = sessions.open("a", "d")
    clock.now += 30
    assert sessions.remaining(session) == 30
    clock.now += 30
    assert sessions.find(late) is None
    sessions.open("a", "d")
    assert sessions.end_for_token("d") == 1
    assert ended == ["signed_out", "replaced", "evicted", "expired", "expired", "revoked"]


def test_ending_a_tokens_sessions_leaves_others() -> None:
    sessions = WebSessions()
    a1, _ = sessions.open("a", "old")
    a2, _ = sessions.open("a", "old")
    b, _ = sessions.open("b", "other")
    assert sessions.end_for_token("old") == 2
    assert sessions.find(a1) is None and sessions.find(a2) is None
    assert sessions.find(b) is not None


def test_a_code_works_once_and_not_after_it_expired() -> None:
    clock = Clock()
    sessions = WebSessions(clock=clock)
    code = sessions.issue_code("digest", ttl_s=10)
    assert sessions.redeem(code) == "digest"
    assert sessions.redeem(code) is None
    late = sessions.issue_code("digest", ttl_s=10)
    clock.now += 10
    assert sessions.redeem(late) is None
    assert sessions.redeem("") is None and sessions.redeem(None) is None


def test_each_session_has_its_own_csrf_token_and_few_messages() -> None:
    sessions = WebSessions()
    _, one = sessions.open("a", "d")
    _, two = sessions.open("a", "d")
    assert one.csrf != two.csrf
    assert one.csrf_matches(one.csrf) and not one.csrf_matches(two.csrf)
    assert not one.csrf_matches(None) and not one.csrf_matches("")
    for i in range(20):
        one.say("ok", f"message {i}")
    assert [text for _, text in one.flash] == [f"message {i}" for i in range(15, 20)]


def test_codes_asked_for_in_a_loop_push_out_only_the_askers_own() -> None:
    sessions = WebSessions(clock=Clock())
    operators = sessions.issue_code("operator")
    flood = [sessions.issue_code("mallory") for _ in range(1000)]
    assert sessions.redeem(operators) == "operator"
    # The newest few of the flood still work; the older ones gave way to them.
    assert sessions.redeem(flood[-1]) == "mallory"
    assert sessions.redeem(flood[0]) is None
