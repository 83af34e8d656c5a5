"""The real Codex, as a worker, taken over in its FIRST turn: the thread id is stored as soon as
Codex reports ``thread.started``, so the takeover's turn resumes that thread (``codex exec
resume``) instead of starting a new one, and the model sees the cut turn's task again. A local
fake model server plays the model: the first turn's call hangs until the turn is cut.

Opt-in, deselected otherwise: set ``PARLEY_REAL_CLIS=1`` and have ``codex`` on ``PATH`` (or
``PARLEY_CODEX_BIN``); a binary that is not found skips its test.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from parley.adapters.runtimes import guard
from parley.adapters.runtimes.codex import CODEX_THREAD_KEY
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.workers.records import StartSpec
from tests.conftest import MakeAgent
from tests.fakes.cli_model_servers import FakeResponsesServer
from tests.fakes.model_server import FakeReply
from tests.integration.test_worker_cli_sessions import kept_states, runtime_state
from tests.unit.test_runtime_real_clis import binary, private_home

pytestmark = pytest.mark.real_clis

TASK = "Refactor the parser module"
INSTRUCTION = "Keep the public API; rename only the internals."


@pytest.fixture(autouse=True)
def allow_the_real_clis(monkeypatch: pytest.MonkeyPatch) -> None:
    # The binary only ever talks to the fake model server on 127.0.0.1.
    monkeypatch.setattr(guard, "ALLOW_MODEL_REQUESTS", True)


async def test_real_codex_taken_over_in_its_first_turn_resumes_its_thread(
    hub: Hub, operator: Principal, make_agent: MakeAgent, tmp_path: Path
) -> None:
    async with FakeResponsesServer() as model:
        model.script(FakeReply(hang=True))
        model.default = FakeReply(text="Renamed the internals.")
        provider = [
            "-c",
            "model_provider=fake",
            "-c",
            "model_providers.fake.name=fake",
            "-c",
            f"model_providers.fake.base_url={model.base_url}",
            "-c",
            "model_providers.fake.wire_api=responses",
            "-c",
            "model_providers.fake.stream_max_retries=0",
        ]
        runtime = {
            "kind": "command",
            "preset": "codex",
            "executable": binary("codex", "PARLEY_CODEX_BIN"),
            "env": private_home(tmp_path),
            "cwd": str(tmp_path),
            "extra_args": provider,
        }
        await make_agent("coder", runtime=runtime)
        written = kept_states(hub)
        worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt=TASK))
        # Stored while the first turn still runs: its model call hangs, no turn.completed.
        state = await asyncio.wait_for(written.get(), 60)
        thread = state[CODEX_THREAD_KEY]
        await asyncio.wait_for(model.received.wait(), 60)
        assert TASK in json.dumps(model.requests[0])
        assert (await hub.workers.get(operator, worker.id)).state == "running"

        outcome = await hub.workers.takeover(operator, worker.id, INSTRUCTION, timeout_s=30)
        assert outcome.interrupted and not outcome.timed_out
        await hub.tasks.wait_idle()

        # The takeover's turn went on in the same thread: the model got the cut turn's own
        # message back (its history, not just the envelope quoting it) before the takeover,
        # and the stored thread is unchanged.
        assert (await hub.workers.get(operator, worker.id)).state == "idle"
        assert await runtime_state(hub, worker.session_id) == {CODEX_THREAD_KEY: thread}
        cut_turn = user_messages(model.requests[0])[-1]
        resumed = user_messages(model.requests[-1])
        assert cut_turn in resumed[:-1]
        assert INSTRUCTION in json.dumps(resumed[-1])


def user_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The user messages of a Responses request's input, in order."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    return [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
