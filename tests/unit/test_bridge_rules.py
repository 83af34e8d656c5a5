"""The chat bridge's pure rules (core/bridge.py): titles, archive flags, the parent's summary,
what is relayed out, nonces within Discord's limits, and Discord tokens kept out of logs."""

from __future__ import annotations

from datetime import UTC, datetime

from parley.core import bridge as br
from parley.core.channels import ChannelMessage
from parley.core.redact import redact_text


def message(seq: int, kind: str = "agent", **metadata: object) -> ChannelMessage:
    return ChannelMessage(
        id=f"m{seq}",
        channel_id="c",
        seq=seq,
        sender_id="lead" if kind == "agent" else kind,
        sender_kind=kind,  # type: ignore[arg-type]
        content="hello",
        metadata=dict(metadata),
        created=datetime(2026, 12, 1, tzinfo=UTC),
    )


def test_a_title_carries_the_state_emoji_parent_and_first_line_within_100_characters() -> None:
    assert br.post_title("pending", "audit", "Find flaky tests\nmore") == (
        "⏳ [audit]: Find flaky tests"
    )
    expected = {
        "running": "🏃",
        "idle": "💤",
        "interrupted": "⚠️",
        "completed": "✅",
        "failed": "❌",
    }
    for state, emoji in expected.items():
        assert br.post_title(state, "p", "x").startswith(f"{emoji} [p]: ")
    long = br.post_title("running", "p", "word " * 100)
    assert len(long) == br.TITLE_MAX and long.endswith("…")


def test_posts_are_archived_when_released_stale_or_finished_and_only_then() -> None:
    assert {s for s in br.STATUS_EMOJI if br.is_archived(s)} == {
        "stale",
        "released",
        "completed",
        "failed",
        "killed",
    }


def test_the_parent_summary_lists_children_with_results_and_hides_released_ones() -> None:
    text = br.summary_text(
        "audit",
        [
            br.ChildLine(name="parser", state="completed", note="3 flaky\nmore"),
            br.ChildLine(name="lexer", state="running"),
            br.ChildLine(name="old", state="released"),
        ],
    )
    assert text.splitlines() == [
        "**Children of audit**",
        "✅ parser — completed: 3 flaky",
        "🏃 lexer — running",
    ]


def test_messages_from_discord_and_the_opening_task_are_not_relayed_out() -> None:
    assert br.should_relay_out(message(2), worker_post=True)
    assert not br.should_relay_out(message(3, via="discord"), worker_post=True)
    assert not br.should_relay_out(message(1, "system"), worker_post=True)
    assert br.should_relay_out(message(1, "system"), worker_post=False)
    assert not br.should_relay_out(message(4, "system", dispatch_message_id="x"), worker_post=False)


def test_a_relayed_message_fits_one_discord_message() -> None:
    big = message(2).model_copy(update={"content": "x" * 5000})
    text = br.relay_text(big)
    assert len(text) <= br.MESSAGE_MAX and text.endswith(
        "(truncated; the whole text is in the hub)"
    )


def test_nonces_are_stable_per_message_and_within_discords_limit() -> None:
    a = br.nonce_for("01JABCDEFGHJKMNPQRSTVWXYZ0")
    assert a == br.nonce_for("01JABCDEFGHJKMNPQRSTVWXYZ0")
    assert a != br.nonce_for("01JABCDEFGHJKMNPQRSTVWXYZ1")
    assert len(a) <= br.NONCE_MAX


def test_a_discord_bot_token_is_redacted_from_log_text() -> None:
    token = "MTA5ODc2NTQzMjEwOTg3NjU0Mw.GhIjKl.abcdefghijklmnopqrstuvwxyz0123456789"
    line = f"login with {token} failed"
    assert redact_text(line) == "login with *** failed"
    assert redact_text("version 2.7.1 of the client") == "version 2.7.1 of the client"
