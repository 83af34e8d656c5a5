"""The transcript window is bounded by its total size as well as by its count (C5, Q3): long
messages cannot make a prompt outgrow a model's context, the latest entries stay, and the task
keeps its own section."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parley.core import discussion as d
from parley.core.channels import TRANSCRIPT_WINDOW
from tests.unit.test_discussion_core import message, prompt_for, transcript_of

TASK = "ORIGINAL TASK: design the scheduler"


def test_long_messages_are_bounded_by_the_character_budget() -> None:
    history = [message(1, "operator", "human", TASK)]
    history += [message(i, "beta", "agent", f"{i} " + "x" * 6000) for i in range(2, 200)]
    window = d.transcript_window(history)
    entries = [d.transcript_entry(m, {}) for m in window]
    assert 0 < len(window) < TRANSCRIPT_WINDOW
    assert sum(e.prompt_chars for e in entries) <= d.TRANSCRIPT_CHAR_BUDGET
    # The window is the latest messages: one more would break the budget.
    assert window[-1].seq == 199 and window[0].seq == 199 - len(window) + 1
    one_more = d.transcript_entry(history[-len(window) - 1], {})
    assert sum(e.prompt_chars for e in entries) + one_more.prompt_chars > (d.TRANSCRIPT_CHAR_BUDGET)
    prompt = prompt_for(3, window, task=TASK)
    assert f"## User task\n{TASK}\n" in prompt.user_text()
    assert prompt.char_count() < d.TRANSCRIPT_CHAR_BUDGET + 4000


def test_short_messages_still_get_the_whole_count_window() -> None:
    history = [message(i, "beta", "agent", f"short {i}") for i in range(1, 300)]
    window = d.transcript_window(history)
    assert len(window) == TRANSCRIPT_WINDOW
    assert len(transcript_of(prompt_for(2, window))) == TRANSCRIPT_WINDOW


def test_window_size_counts_from_the_latest_entry() -> None:
    entries = [d.transcript_entry(message(i, "b", "agent", "y" * 100), {}) for i in range(1, 11)]
    each = entries[0].prompt_chars
    assert d.window_size(entries, budget=each * 3) == 3
    assert d.window_size(entries, budget=each * 3 - 1) == 2
    assert d.window_size(entries, limit=4, budget=10**9) == 4
    assert d.window_size([], budget=10) == 0
    assert d.window_size(entries, budget=0) == 0


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=300), max_size=60),
    limit=st.integers(min_value=0, max_value=40),
    budget=st.integers(min_value=0, max_value=4000),
    drops=st.lists(st.integers(min_value=1, max_value=20), max_size=3),
)
def test_the_running_window_always_matches_window_size(
    sizes: list[int], limit: int, budget: int, drops: list[int]
) -> None:
    """A running task keeps its window's size as entries arrive and old ones leave; it must
    equal the plain count over the same entries after every step."""
    running = d.RunningWindow(limit=limit, budget=budget)
    kept: list[d.TranscriptEntry] = []
    for i, size in enumerate(sizes):
        entry = d.transcript_entry(message(i + 1, "b", "agent", "é" * size), {})
        running.append(entry)
        kept.append(entry)
        if drops and i % 7 == 6:
            count = min(drops.pop(), len(kept))
            running.drop_oldest(count)
            del kept[:count]
        size = d.window_size(kept, limit=limit, budget=budget)
        assert running.size() == size
        assert running.chars(size) == sum(e.prompt_chars for e in kept[len(kept) - size :])
        assert running.entries == kept


@settings(max_examples=100, deadline=None)
@given(
    texts=st.lists(st.text(max_size=40), max_size=6),
    system=st.text(max_size=30),
    task=st.text(max_size=30),
    instructions=st.text(max_size=30),
)
def test_a_prompts_size_is_counted_without_rendering_it(
    texts: list[str], system: str, task: str, instructions: str
) -> None:
    entries = tuple(
        d.TranscriptEntry(id=str(i), speaker=t[:5], role="agent", content=t)
        for i, t in enumerate(texts)
    )
    prompt = d.Prompt(system=system, task=task, transcript=entries, instructions=instructions)
    assert prompt.char_count() == len(prompt.render()) - 2  # less the "\n\n" between parts
    kept = sum(e.prompt_chars for e in entries)
    assert prompt.char_count(kept) == prompt.char_count()
