"""Usage from the command-line agents, in their own event shapes: Claude Code's ``result``
(tokens, and a cost that is the running total of its process) and Codex's ``turn.completed``
(tokens, cached input apart). The fakes print what the real CLIs print."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from parley.core.identity import Principal
from parley.core.usage import UsageFilter
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.fakes.fake_claude import COST_PER_TURN

FAKES = Path(__file__).resolve().parents[1] / "fakes"


async def turn(hub: Hub, operator: Principal, channel: str, text: str) -> None:
    await hub.channels.post(operator, channel, text)
    await hub.tasks.wait_idle()


async def records(hub: Hub, agent_id: str) -> list[Any]:
    async with hub.store.read() as tx:
        u = tx.table("turn_usage").c
        return await tx.select("turn_usage", u.agent_id == agent_id, order_by=[u.created, u.id])


async def fake_claude(make_agent: MakeAgent, mode: str) -> str:
    """The agent ``coder``, the fake Claude Code in ``mode``; its work channel."""
    runtime = {
        "kind": "command",
        "protocol": "claude-stream-json",
        "argv": [sys.executable, str(FAKES / "fake_claude.py"), mode],
    }
    coder = await make_agent("coder", runtime=runtime)
    assert coder.principal.work_channel_id is not None
    return coder.principal.work_channel_id


async def test_a_live_claude_session_books_each_turns_own_cost(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    work = await fake_claude(make_agent, "reply")
    await turn(hub, operator, work, "first")
    await turn(hub, operator, work, "second")
    booked = await records(hub, "coder")
    assert len(booked) == 2
    for r in booked:
        assert r.model == "claude-sonnet-4-5" and r.runtime == "command"
        assert (r.input_tokens, r.output_tokens) == (11, 5)
        # One process served both turns: each turn is booked what the total grew by.
        assert r.cost_usd == pytest.approx(COST_PER_TURN)
    totals = await hub.usage.totals(operator, "agent", UsageFilter())
    assert totals[0].cost_usd == pytest.approx(2 * COST_PER_TURN)


async def test_a_codex_turn_books_its_tokens_and_cached_input(
    hub: Hub, operator: Principal, make_agent: MakeAgent, tmp_path: Path
) -> None:
    executable = tmp_path / "codex-fake"
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_codex.py"}" "$@"\n')
    executable.chmod(0o755)
    threads = tmp_path / "threads"
    threads.mkdir()
    runtime = {
        "kind": "command",
        "preset": "codex",
        "executable": str(executable),
        "model": "gpt-5-codex",
        "env": {
            "FAKE_CODEX_HOME": str(threads),
            "FAKE_CODEX_LOGGED_IN": "1",
            "CODEX_API_KEY": "",
            "OPENAI_API_KEY": "",
        },
    }
    coder = await make_agent("codex", runtime=runtime)
    work = coder.principal.work_channel_id
    assert work is not None
    await turn(hub, operator, work, "go")
    [booked] = await records(hub, "codex")
    assert (booked.input_tokens, booked.output_tokens, booked.cache_read_tokens) == (42, 7, 30)
    # Codex names no model in its events: the agent's configured one is booked.
    assert booked.model == "gpt-5-codex" and booked.cost_usd is None


async def test_a_failed_claude_turn_is_booked_its_own_cost(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    work = await fake_claude(make_agent, "error")
    await turn(hub, operator, work, "first")
    await turn(hub, operator, work, "second")
    tasks = await hub.tasks.latest_of_channel(operator, work, 2)
    assert [t.end_reason for t in tasks] == ["failed", "failed"]
    # Each failed turn is booked what it used; the second only its own cost, not the first's.
    booked = await records(hub, "coder")
    assert [(r.input_tokens, r.output_tokens) for r in booked] == [(11, 5), (11, 5)]
    assert [r.cost_usd for r in booked] == [pytest.approx(COST_PER_TURN)] * 2
