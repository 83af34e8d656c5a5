"""Mail to a busy worker goes into its live turn (M5 "worker stdin"): Claude Code's stream-json
input takes user messages while a turn runs, so session mail, and a child's result, is pushed
there as soon as it is committed, marked as mail, instead of waiting for the next turn.

The fake Claude Code (``slow``) holds its turn open until the test says ``go``; a user frame
that arrives meanwhile is taken into the turn, echoed with its ``uuid``
(``--replay-user-messages``, which the preset passes) and recorded in its session file.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.core.runtime import TurnInput
from parley.service.hub import Hub
from parley.service.workers import live_mail
from parley.service.workers.records import SpawnSpec, StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.ready import ReadyListener
from tests.integration.test_worker_takeover_cli import events_of, frames_heard
from tests.integration.test_workers import scripted

FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
async def ready() -> AsyncIterator[ReadyListener]:
    async with ReadyListener() as listener:
        yield listener


def slow_claude(tmp_path: Path, ready: ReadyListener) -> dict[str, Any]:
    """The ``claude-code`` preset running the fake in ``slow`` mode, sessions kept as files."""
    executable = tmp_path / "claude-bin"
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_claude.py"}" "$@"\n')
    executable.chmod(0o755)
    home = tmp_path / "claude-sessions"
    home.mkdir()
    env = {
        "FAKE_READY_PORT": str(ready.port),
        "FAKE_CLAUDE_HOME": str(home),
        "FAKE_CLAUDE_MODE": "slow",
    }
    return {"kind": "command", "preset": "claude-code", "executable": str(executable), "env": env}


async def agent_replies(hub: Hub, channel_id: str) -> list[str]:
    async with hub.store.read() as tx:
        rows = await tx.channel_messages(channel_id, latest=50)
    return [m.content for m in rows if m.sender_kind == "agent"]


async def test_session_mail_to_a_busy_claude_worker_is_pushed_into_its_live_turn(
    hub: Hub, operator: Principal, make_agent: MakeAgent, ready: ReadyListener, tmp_path: Path
) -> None:
    runtime = slow_claude(tmp_path, ready)
    await make_agent("coder", runtime=runtime)
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Port it"))
    kind, pid, number, session = (await ready.next_line()).split()
    assert (kind, number) == ("turn", "1")

    sent = await hub.mail.send(
        operator,
        SendRequest(
            to=f"session:{worker.session_id}",
            kind="info",
            subject="constraint",
            body="Keep Python 3.11 compatibility.",
        ),
    )
    # Taken by the same process, in the same turn, while it works.
    assert (await ready.next_line()).split()[:2] == ["mail", pid]
    pushed = frames_heard(Path(runtime["env"]["FAKE_CLAUDE_HOME"]), session)[-1]
    assert pushed.startswith("<pending_mail>")
    assert "while you work on this turn" in pushed
    assert "> Keep Python 3.11 compatibility." in pushed
    message = await hub.mail.get(operator, sent.message.id)
    assert message.status == "delivered"

    await ready.tell("go")
    await hub.tasks.wait_idle()
    # One turn, whose answer knows the mail; the mail is not read again at the next turn.
    replies = await agent_replies(hub, worker.channel_id)
    assert len(replies) == 1 and replies[0].endswith(" + 1 more")
    assert "worker.mail_pushed" in await events_of(hub, f"worker:{worker.id}")
    assert (await hub.workers.get(operator, worker.id)).state == "idle"
    await hub.runtimes.aclose()


async def test_a_childs_result_is_pushed_into_its_blocked_parents_live_turn(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    ready: ReadyListener,
    tmp_path: Path,
) -> None:
    runtime = slow_claude(tmp_path, ready)
    await make_agent("coder", runtime=runtime)
    helper = await scripted(make_agent, runtimes, "helper")
    helper.replies = lambda turn: "found 3 flaky tests"
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Audit it"))
    kind, pid, _, session = (await ready.next_line()).split()
    assert kind == "turn"

    await hub.workers.spawn(
        operator,
        worker.id,
        SpawnSpec(prompt="Find the flaky tests", agent_id="helper", block_parent=True),
    )
    assert (await ready.next_line()).split()[:2] == ["mail", pid]
    pushed = frames_heard(Path(runtime["env"]["FAKE_CLAUDE_HOME"]), session)[-1]
    assert "found 3 flaky tests" in pushed
    assert (await hub.workers.get(operator, worker.id)).blocked_on_message_id is None

    await ready.tell("go")
    await hub.tasks.wait_idle()
    # The parent's turn was not cut and no second turn was needed to read the result.
    replies = await agent_replies(hub, worker.channel_id)
    assert len(replies) == 1 and replies[0].endswith(" + 1 more")
    assert (await hub.workers.get(operator, worker.id)).state == "idle"
    await hub.runtimes.aclose()


async def test_mail_the_turn_no_longer_takes_goes_back_to_pending_for_the_next_turn(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await scripted(make_agent, runtimes, "coder")
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="Port it"))
    await hub.tasks.wait_idle()
    sent = await hub.mail.send(
        operator,
        SendRequest(to=f"session:{worker.session_id}", kind="info", subject="s", body="b"),
    )
    ended = TurnInput()

    async def refuse(text: str) -> bool:
        assert (await hub.mail.get(operator, sent.message.id)).status == "delivered"  # claimed
        return False  # the turn ended between the claim and the push

    ended.open(refuse)
    assert await live_mail.push_pending(hub.workers, worker, ended) == 0
    assert (await hub.mail.get(operator, sent.message.id)).status == "pending"
    assert "worker.mail_not_taken" in await events_of(hub, f"worker:{worker.id}")
    # The next turn reads it in its mail block.
    await hub.workers.resume(operator, worker.id)
    await hub.tasks.wait_idle()
    assert (await hub.mail.get(operator, sent.message.id)).status == "delivered"
