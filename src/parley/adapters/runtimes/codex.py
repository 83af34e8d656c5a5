"""Codex non-interactive mode: ``codex exec --json``, its command line and its JSONL events.

``codex exec --json [flags] -`` reads the prompt on stdin and writes JSON Lines:
``thread.started`` (``thread_id``), ``turn.started``, ``item.started``/``item.completed``
(``reasoning``, ``command_execution``, and the reply: an ``agent_message``), ``error`` events
while it retries (``"Reconnecting... 1/5 (stream disconnected …)"``), then ``turn.completed``
(with ``usage``) or ``turn.failed`` (with ``error.message``). One process per turn: ``codex exec
[flags] resume <thread id> -`` continues a thread; an id it does not know makes it exit 1 with
"no rollout found for thread id …" on stderr and no events. Exec mode has no interrupt: a
cancelled turn stops the process and all it started, and the next turn resumes the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from parley.adapters.runtimes.child import ChildProcess, exit_note, json_events
from parley.adapters.runtimes.race import ProviderReply
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Usage

CODEX_THREAD_KEY = "codex_thread_id"
STALE_THREAD_MARK = "no rollout found"
"""What Codex says when ``resume`` names a thread it does not have."""
NETWORK_WAIT_MARK = "Reconnecting... waiting for network"
"""Codex's report while it cannot connect at all; it repeats it for as long as it is let run."""
CREDENTIAL_ENV = ("CODEX_API_KEY", "OPENAI_API_KEY")
_DETAIL_CHARS = 2000


def codex_argv(
    *,
    executable: str = "codex",
    model: str | None = None,
    resume: str | None = None,
    sandbox: str | None = None,
    skip_git_repo_check: bool = False,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of ``codex exec --json``; flags go before ``resume`` since only the
    conversation is kept from the resumed thread, and ``-`` reads the prompt from stdin."""
    argv = [executable, "exec", "--json"]
    if model:
        argv += ["--model", model]
    if sandbox:
        argv += ["--sandbox", sandbox]
    if skip_git_repo_check:
        argv.append("--skip-git-repo-check")
    argv += list(extra_args)
    if resume:
        argv += ["resume", resume]
    argv.append("-")
    return argv


def codex_state(event: dict[str, Any]) -> dict[str, Any] | None:
    """The runtime state an event names: ``thread.started`` (or ``thread.resumed``), the first
    event of a turn, carries the thread id, kept for ``resume`` before the turn completes."""
    if event.get("type") in ("thread.started", "thread.resumed"):
        thread_id = event.get("thread_id")
        if isinstance(thread_id, str) and thread_id:
            return {CODEX_THREAD_KEY: thread_id}
    return None


def parse_codex_stream(lines: Iterable[str | bytes]) -> ProviderReply:
    """The reply in ``codex exec --json`` output (see :func:`codex_reply`)."""
    return codex_reply(json_events(lines))


def codex_reply(events: Iterable[dict[str, Any]]) -> ProviderReply:
    """The last ``agent_message`` item, the ``turn.completed`` usage and the thread id.

    ``error`` events are retries Codex reports on its way (counted as ``reconnects``); the turn
    fails only on ``turn.failed``, or when the output ends without ``turn.completed``.
    """
    thread_id: str | None = None
    text = ""
    usage: dict[str, Any] | None = None
    failed: list[str] = []
    errors: list[str] = []
    for event in events:
        kind = event.get("type")
        state = codex_state(event)
        if state is not None:
            thread_id = state[CODEX_THREAD_KEY]
        elif kind == "item.completed":
            item = event.get("item") or {}
            if item.get("type") == "agent_message":
                text = str(item.get("text") or "")
        elif kind == "turn.completed":
            usage = event.get("usage") or {}
        elif kind == "turn.failed":
            failed.append(str((event.get("error") or {}).get("message", "turn failed")))
        elif kind == "error":
            errors.append(str(event.get("message", "error")))
    if failed:
        raise RuntimeFailure(
            f"Codex failed the turn: {'; '.join(failed)[:_DETAIL_CHARS]}",
            reason="error",
            thread_id=thread_id,
        )
    if usage is None:
        said = f"; its last error: {errors[-1][:_DETAIL_CHARS]}" if errors else ""
        raise RuntimeFailure(
            f"Codex ended without turn.completed{said}", reason="error", thread_id=thread_id
        )
    return ProviderReply(
        text=text,
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cached_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_write_input_tokens") or 0),
        ),
        runtime_state={CODEX_THREAD_KEY: thread_id} if thread_id else None,
        timings={"reconnects": float(len(errors))} if errors else {},
    )


def is_stale_thread(stderr_tail: str) -> bool:
    """Whether Codex refused ``resume`` because it does not have the thread."""
    return STALE_THREAD_MARK in stderr_tail


class NetworkWatch:
    """Counts Codex's "waiting for network" reports in one turn: without a connection (or
    credentials for the network it tries) Codex retries until it is stopped, and ``limit``
    reports are enough to say so instead of waiting for the turn's deadline."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.waits = 0
        self.last = ""
        self.gave_up = asyncio.Event()

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") != "error" or self.gave_up.is_set():
            return
        message = str(event.get("message", ""))
        if message.startswith(NETWORK_WAIT_MARK):
            self.waits += 1
            self.last = message
            if self.limit is not None and self.waits >= self.limit:
                self.gave_up.set()

    def failure(self) -> RuntimeFailure:
        return RuntimeFailure(
            f"Codex cannot reach its model provider ({self.last[:_DETAIL_CHARS]!r}, reported "
            f"{self.waits} times); check the network, the provider's base_url and credentials",
            reason="error",
            network_waits=self.waits,
        )


def needs_login_check(env: Mapping[str, str], extra_args: Sequence[str]) -> bool:
    """Whether Codex relies on a stored login: no key in the environment and no provider of the
    agent's own (``-c model_provider=…``, which brings its own credentials)."""
    if any(env.get(name) for name in CREDENTIAL_ENV):
        return False
    return not any("model_provider=" in arg for arg in extra_args)


async def check_login(
    executable: str, *, cwd: str | None, env: dict[str, str], kill_grace_s: float
) -> None:
    """Run ``codex login status`` and refuse the turn when Codex is not logged in: without
    credentials ``codex exec`` does not fail, it retries the network until the deadline."""
    child = await ChildProcess.start(
        [executable, "login", "status"], cwd=cwd, env=env, kill_grace_s=kill_grace_s
    )
    try:
        child.close_stdin()
        code = await child.wait()
    finally:
        await child.stop()
    if code == 0:
        return
    said = (child.stdout_text() + child.stderr_tail()).strip().splitlines()
    status = said[-1] if said else ""
    raise RuntimeFailure(
        f"Codex is not logged in ('codex login status' says {status!r}"
        f"{exit_note(code, '')}); run 'codex login' as the user the hub runs as, or set "
        f"{CREDENTIAL_ENV[0]} in the agent's runtime env",
        reason="error",
        **child.failure_details(),
    )
