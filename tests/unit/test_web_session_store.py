"""The web UI's session store: idle and absolute expiry, its bound, one-time codes."""

from __future__ import annotations

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


def test_the_store_is_bounded_and_drops_the_oldest() -> None:
    sessions = WebSessions(max_sessions=2)
    first, _ = sessions.open("a", "d1")
    second, _ = sessions.open("b", "d2")
    third, _ = sessions.open("c", "d3")
    assert sessions.find(first) is None
    assert sessions.find(second) is not None and sessions.find(third) is not None


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
