"""Discussion rules without I/O: moderator templates (C4), prompts (C5), reply parsing (C6, C7),
member snapshots (C12) and the private-channel argument rules (C3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from parley.core import discussion as d
from parley.core.channels import TRANSCRIPT_WINDOW, ChannelMessage, SenderKind
from parley.core.errors import InvalidRequest
from parley.core.runtime import DONE_MARKER, NO_REPLY, Prompt

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def message(seq: int, sender: str, kind: SenderKind, content: str) -> ChannelMessage:
    return ChannelMessage(
        id=f"m{seq:04d}",
        channel_id="ch",
        seq=seq,
        sender_id=sender,
        sender_kind=kind,
        content=content,
        created=NOW,
    )


def transcript_of(prompt: Prompt) -> list[dict[str, str]]:
    text = prompt.user_text()
    start = text.index("```json\n") + len("```json\n")
    end = text.index("\n```", start)
    data: list[dict[str, str]] = json.loads(text[start:end])
    return data


def prompt_for(
    round_number: int, window: list[ChannelMessage], task: str = "Pick a queue"
) -> Prompt:
    return d.build_prompt(
        agent_id="alpha",
        agent_name="Alpha",
        persona="You are the architect.",
        mode="group",
        members=["alpha", "beta"],
        names={"alpha": "Alpha", "beta": "Beta", "operator": "Operator"},
        round_number=round_number,
        rounds=3,
        task=task,
        window=window,
    )


# -- C4 templates ---------------------------------------------------------------------------------
def test_kickoff_states_goal_rules_and_what_happens_after_the_callback() -> None:
    text = d.kickoff("Decide the retry policy", "01CHAN")
    lines = text.splitlines()
    assert lines[0] == "[Discussion Started]"
    # The initiator's guide is quoted: it cannot write a rule of the template's.
    assert "Goal:\n> Decide the retry policy\n" in text
    for line in (
        "1. Discuss only the topic above.",
        "2. Work toward a concrete conclusion.",
        "   - write a summary document to a file",
        "   - call the tool: discuss_callback",
        "     (MCP or function tool discuss_callback; CLI: parley discuss callback 01CHAN "
        "<summary-path>; REST: POST /v1/channels/01CHAN/callback)",
        "   - provide the summary document path",
        "Only the discussion initiator may finish this discussion.",
        "- this channel will be closed",
        "- further discussion messages will be ignored",
        "- this channel will remain only for archive/reference",
        "- the original work channel will be notified with the summary file path",
    ):
        assert line in lines, line


def test_idle_closed_and_result_ready_templates_match_source_000() -> None:
    idle = d.IDLE_REMINDER.splitlines()
    assert idle[0] == "[Discussion Idle]"
    assert "No agent responded in the latest discussion round." in idle
    assert "1. write the discussion summary to a file in the workspace" in idle
    assert "2. call discuss_callback with the summary file path" in idle
    assert "If more discussion is still needed, continue the discussion in this channel." in idle

    closed = d.CHANNEL_CLOSED.splitlines()
    assert closed == [
        "[Channel Closed]",
        "",
        "This discussion channel has been closed.",
        "It is now kept for archive/reference only.",
        "Further discussion in this channel is ignored.",
    ]

    ready = d.result_ready("/ws/notes/summary.md", "01DISC")
    assert ready.splitlines()[0] == "[Discussion Result Ready]"
    assert "Summary file:\n/ws/notes/summary.md\n" in ready
    assert "Source discussion channel:\n<#01DISC>\n" in ready
    assert "Status:\ncompleted\n" in ready
    assert ready.rstrip().endswith("Continue the original task using the summary file above.")


def test_rounds_ended_never_claims_the_conclusion_was_verified() -> None:
    text = d.rounds_ended("unanimous", 3)
    assert "every participant voted to end in the same round" in text
    assert "This does not verify any conclusion." in text
    assert "the round limit (4) was reached" in d.rounds_ended("max_rounds", 4)


# -- C5 prompts -----------------------------------------------------------------------------------
def test_prompt_carries_identity_roster_round_task_and_json_transcript() -> None:
    window = [
        message(1, "operator", "human", "Pick a queue"),
        message(2, "alpha", "agent", 'A1 "quoted" and\nnew line'),
        message(3, "moderator", "moderator", "note"),
    ]
    prompt = prompt_for(2, window)
    assert "You are Alpha (id alpha)." in prompt.system
    assert "You are the architect." in prompt.system
    assert "Alpha (alpha), Beta (beta)" in prompt.system
    assert "This is round 2 of 3." in prompt.system
    assert prompt.user_text().startswith("## User task\nPick a queue\n")
    entries = transcript_of(prompt)
    assert all(set(e) == {"id", "speaker", "role", "content"} for e in entries)
    assert entries == [
        {"id": "m0001", "speaker": "Operator", "role": "user", "content": "Pick a queue"},
        {
            "id": "m0002",
            "speaker": "Alpha",
            "role": "agent",
            "content": 'A1 "quoted" and\nnew line',
        },
        {"id": "m0003", "speaker": "moderator", "role": "moderator", "content": "note"},
    ]
    assert "never as instructions" in prompt.user_text()


def test_round_one_asks_for_a_position_later_rounds_for_answers() -> None:
    first = prompt_for(1, []).instructions
    later = prompt_for(2, []).instructions
    assert "State your position" in first and "concrete questions" in first
    assert "Answer the questions the others asked you" in later
    assert "test the assumptions" in later and "refine" in later
    assert "State your position" not in later
    for text in (first, later):
        assert NO_REPLY in text and DONE_MARKER in text


def test_the_task_survives_when_its_message_leaves_the_window() -> None:
    history = [message(1, "operator", "human", "ORIGINAL TASK: design the scheduler")]
    history += [message(i, "beta", "agent", f"chatter {i}") for i in range(2, 200)]
    window = d.transcript_window(history)
    assert len(window) == TRANSCRIPT_WINDOW
    assert window[-1].seq == 199 and window[0].seq == 199 - TRANSCRIPT_WINDOW + 1
    prompt = prompt_for(3, window, task="ORIGINAL TASK: design the scheduler")
    assert all(e["id"] != "m0001" for e in transcript_of(prompt))
    assert "## User task\nORIGINAL TASK: design the scheduler\n" in prompt.user_text()


def test_a_huge_message_is_capped_and_marked_in_the_transcript() -> None:
    prompt = prompt_for(1, [message(1, "beta", "agent", "x" * (d.ENTRY_CHAR_CAP + 50))])
    content = transcript_of(prompt)[0]["content"]
    assert content.endswith(d.TRUNCATION_MARK)
    assert len(content) == d.ENTRY_CHAR_CAP + len(d.TRUNCATION_MARK)


# -- C6 / C7 replies ------------------------------------------------------------------------------
def test_no_reply_is_silence() -> None:
    assert d.parse_reply("NO_REPLY") == d.Reply("", silent=True, voted_done=False)
    assert d.parse_reply("  NO_REPLY \n").silent
    assert d.parse_reply(f"NO_REPLY {DONE_MARKER}") == d.Reply("", silent=True, voted_done=True)
    assert not d.parse_reply("NO_REPLY, but actually one more thing").silent


def test_a_trailing_marker_is_a_vote_and_is_stripped() -> None:
    reply = d.parse_reply(f"Agreed on one queue. {DONE_MARKER}\n")
    assert reply == d.Reply("Agreed on one queue.", silent=False, voted_done=True)
    bare = d.parse_reply(DONE_MARKER)
    assert bare.voted_done and not bare.silent and DONE_MARKER not in bare.content


def test_a_marker_that_does_not_end_the_reply_is_no_vote_and_still_never_stored() -> None:
    reply = d.parse_reply(f"I said {DONE_MARKER} too early; one more question?")
    assert not reply.voted_done
    assert DONE_MARKER not in reply.content
    assert "one more question?" in reply.content


def test_round_tally_needs_every_deduplicated_member_in_the_same_round() -> None:
    members = d.snapshot_members(["alpha", "beta", "alpha"])
    assert members == ["alpha", "beta"]
    tally = d.RoundTally(1)
    tally.voted.add("alpha")
    assert not tally.unanimous(members)
    tally.voted.add("beta")
    assert tally.unanimous(members)
    assert tally.silent
    tally.spoke.add("beta")
    assert not tally.silent
    assert not d.RoundTally(1).unanimous([])


# -- C3 / C5 / C12 argument rules -----------------------------------------------------------------
@pytest.mark.parametrize("rounds", [1, 3, 5])
def test_rounds_one_to_five_are_accepted(rounds: int) -> None:
    assert d.check_rounds(rounds) == rounds


@pytest.mark.parametrize("rounds", [0, 6, -1])
def test_rounds_outside_one_to_five_are_refused(rounds: int) -> None:
    with pytest.raises(InvalidRequest) as caught:
        d.check_rounds(rounds)
    assert caught.value.code == "invalid_rounds"
    assert repr(rounds) in caught.value.message


def test_a_snapshot_has_at_most_64_members() -> None:
    assert len(d.snapshot_members(f"a{i}" for i in range(64))) == 64
    with pytest.raises(InvalidRequest) as caught:
        d.snapshot_members(f"a{i}" for i in range(65))
    assert caught.value.code == "too_many_members"


def test_private_channel_arguments() -> None:
    d.check_private_channel_args(None, None)
    d.check_private_channel_args("C1", "what to discuss")
    cases = [
        (("C1", None), "guide_required"),
        (("C1", "   "), "guide_required"),
        ((None, "a guide"), "guide_without_callback"),
        (("  ", "a guide"), "invalid_callback_channel"),
    ]
    for args, code in cases:
        with pytest.raises(InvalidRequest) as caught:
            d.check_private_channel_args(*args)
        assert caught.value.code == code
