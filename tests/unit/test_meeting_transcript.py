"""A meeting's quoted transcript is bounded like a discussion's (R3, Q3): at most the window's
count and the transcript budget in characters, the latest speeches kept, each message rendered
once across the prompts of a meeting."""

from __future__ import annotations

from parley.core import discussion as d
from parley.core.channels import TRANSCRIPT_WINDOW
from parley.core.identity import MODERATOR_ID
from parley.core.runtime import TranscriptEntry
from parley.service.meetings.voices import entries
from tests.unit.test_discussion_core import message


def test_long_speeches_are_bounded_by_the_character_budget() -> None:
    window = [message(i, f"m{i % 7}", "agent", f"{i} " + "s" * 1590) for i in range(1, 129)]
    quoted = entries(window)
    assert 0 < len(quoted) < TRANSCRIPT_WINDOW
    assert sum(e.prompt_chars for e in quoted) <= d.TRANSCRIPT_CHAR_BUDGET
    # The latest speeches stay; one more would break the budget.
    assert [e.id for e in quoted] == [m.id for m in window[-len(quoted) :]]
    one_more = d.transcript_entry(window[-len(quoted) - 1], {})
    assert sum(e.prompt_chars for e in quoted) + one_more.prompt_chars > (d.TRANSCRIPT_CHAR_BUDGET)


def test_short_speeches_keep_the_whole_window_and_the_moderator_is_named() -> None:
    window = [message(1, MODERATOR_ID, "moderator", "[Meeting convened by a] Topic: t")]
    window += [message(i, "a", "agent", f"speech {i}") for i in range(2, TRANSCRIPT_WINDOW + 1)]
    quoted = entries(window)
    assert len(quoted) == TRANSCRIPT_WINDOW
    assert (quoted[0].speaker, quoted[0].role) == ("moderator", "moderator")


def test_each_message_is_rendered_once_and_the_cache_keeps_only_a_bounded_history() -> None:
    rendered: dict[str, TranscriptEntry] = {}
    window = [message(i, "a", "agent", f"speech {i}") for i in range(1, 11)]
    first = entries(window, rendered)
    again = entries([*window, message(11, "b", "agent", "speech 11")], rendered)
    assert all(a is b for a, b in zip(first, again[:10], strict=True))
    # A long meeting slides its window: entries that left it are dropped from the cache.
    for start in range(12, 12 + 3 * TRANSCRIPT_WINDOW, 16):
        window = [message(i, "a", "agent", f"s{i}") for i in range(start, start + 16)]
        entries(window, rendered)
    assert len(rendered) <= 2 * TRANSCRIPT_WINDOW + 16
