"""A command-line agent's child process: its supervisor, its pipes, and how it is stopped.

Each agent runs under a supervisor (:mod:`.supervise`), the leader of a new session, that owns
every process the agent starts, including those it starts in sessions of their own: stopping it
(SIGTERM to the group; the supervisor ends every descendant within the grace period, SIGKILL
after), the agent exiting, or the hub dying (its end of the supervisor's lifeline closes) ends
them all. The supervised process is recorded for the hub while it lives
(:mod:`.ownership`). ``stop`` may be called from anywhere, many times; it always finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from parley.adapters.runtimes import ownership, supervise
from parley.adapters.runtimes.race import ProviderReply
from parley.core.errors import RuntimeFailure
from parley.core.processes import RuntimeProcess

log = logging.getLogger(__name__)

TAIL_CHARS = 2000
"""How much of a child's stderr a failure carries."""
MESSAGE_TAIL_CHARS = 500
"""How much of it goes into the failure's message (the task's error text)."""
_STDERR_KEEP = 16 * 1024
_REAP_S = 5.0
_DRAIN_S = 1.0
_SUPERVISOR_MARGIN_S = 2.0
"""Beyond the grace period, how long the supervisor's own stop (SIGKILL to what remains, and
reaping) may take before the hub kills the tree itself."""
_SUPERVISOR = os.path.abspath(supervise.__file__)


def json_event(raw: str | bytes) -> dict[str, Any] | None:
    """The JSON object on one output line, or None for anything else (debug noise)."""
    line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def json_events(lines: Iterable[str | bytes]) -> Iterable[dict[str, Any]]:
    """The JSON objects among ``lines``; other output is skipped."""
    for raw in lines:
        event = json_event(raw)
        if event is not None:
            yield event


def exit_note(code: int | None, stderr_tail: str) -> str:
    """The exit status and stderr tail as a clause for a failure message: the real cause of a
    failed turn is usually there, and the message is what the task's error keeps."""
    parts = [] if code is None else [f"exit status {code}"]
    tail = stderr_tail.strip()[-MESSAGE_TAIL_CHARS:]
    if tail:
        parts.append(f"stderr: {tail}")
    return f" ({'; '.join(parts)})" if parts else ""


async def start_afresh(
    route: str, stale: str, run: Callable[[], Awaitable[ProviderReply]]
) -> ProviderReply:
    """Run a turn again without the session or thread id ``stale``, which the CLI no longer
    has, so that later turns do not all fail on it: the reply's timings, or the failure's
    details, say that the turn started afresh."""
    log.warning("%s has no session %r; starting a fresh one", route, stale)
    try:
        reply = await run()
    except RuntimeFailure as exc:
        exc.details.update(resumed_fresh=True, stale_session_id=stale)
        raise
    return dataclasses.replace(reply, timings={**reply.timings, "resumed_fresh": 1.0})


class ChildProcess:
    """One running child, its process group, and what it wrote.

    With ``on_line`` every stdout line (the last one even without a line break) is handed to
    it as it arrives; with ``keep_stdout`` the whole stdout is also kept for
    :meth:`stdout_text` (the text protocol, a login check). A JSON stream is only read line by
    line (``keep_stdout=False``): the raw output is not kept twice.
    """

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        *,
        kill_grace_s: float,
        on_line: Callable[[bytes], None] | None,
        keep_stdout: bool,
        lifeline: socket.socket | None = None,
        agent_pid: int | None = None,
        record: RuntimeProcess | None = None,
    ) -> None:
        self.proc = proc
        self.lifeline = lifeline
        """The hub's end of the supervisor's lifeline: closing it ends the whole tree."""
        self.agent_pid = agent_pid if agent_pid is not None else proc.pid
        self.record = record
        self.kill_grace_s = kill_grace_s
        self.interrupt: bytes | None = None
        """Written to stdin before any signal when the child is stopped (Claude Code)."""
        self._on_line = on_line
        self._keep_stdout = keep_stdout
        self._stdout = bytearray()
        self._partial = bytearray()
        self._stderr = bytearray()
        self.exited: asyncio.Future[int] = asyncio.ensure_future(proc.wait())
        self._stdout_reader = asyncio.ensure_future(self._pump_stdout())
        self._readers = [self._stdout_reader, asyncio.ensure_future(self._pump_stderr())]
        self._stopping: asyncio.Future[None] | None = None

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        kill_grace_s: float,
        on_line: Callable[[bytes], None] | None = None,
        keep_stdout: bool = True,
    ) -> ChildProcess:
        """Start ``argv`` under a supervisor, in its own session, with piped stdin, stdout and
        stderr."""
        owner = ownership.OWNER
        lifeline, theirs = socket.socketpair()
        supervised = [
            sys.executable,
            "-I",
            _SUPERVISOR,
            str(theirs.fileno()),
            f"{kill_grace_s:g}",
            "--",
            *argv,
        ]
        try:
            proc = await asyncio.create_subprocess_exec(
                *supervised,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=owner.env(env),
                pass_fds=(theirs.fileno(),),
                # Its own process group, so a stop reaches the supervisor and the agent.
                start_new_session=True,
            )
        except OSError as exc:
            lifeline.close()
            raise _cannot_start(argv, cwd, str(exc)) from exc
        finally:
            theirs.close()
        lifeline.setblocking(False)
        try:
            said = await _first_line(lifeline)
        except BaseException:
            # Cancelled while it starts: the supervisor, its lifeline closed, ends the agent
            # and what it started; that has happened by the time the cancel goes on, so a
            # cancelled turn leaves no process behind (shielded: a second cancel cannot cut it).
            lifeline.close()
            await asyncio.shield(asyncio.ensure_future(_abandon(proc, kill_grace_s)))
            raise
        if not said.startswith("started "):
            lifeline.close()
            await proc.wait()
            raise _cannot_start(argv, cwd, said.removeprefix("error ") or "the supervisor failed")
        agent_pid = int(said.split()[1])
        record = owner.started(proc.pid, agent_pid, argv[0])
        return cls(
            proc,
            kill_grace_s=kill_grace_s,
            on_line=on_line,
            keep_stdout=keep_stdout,
            lifeline=lifeline,
            agent_pid=agent_pid,
            record=record,
        )

    @property
    def pid(self) -> int:
        """The agent's pid (below its supervisor)."""
        return self.agent_pid

    @property
    def supervisor_pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def send(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        # A child that exits without reading its input is judged by its exit status instead.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(data)
            await stdin.drain()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    async def wait(self) -> int:
        return await asyncio.shield(self.exited)

    async def drained(self) -> None:
        """Wait (briefly) until stdout reached its end, so every line written before the exit
        has been handed to ``on_line``."""
        await asyncio.wait({self._stdout_reader}, timeout=_DRAIN_S)

    def stdout_text(self) -> str:
        return self._stdout.decode("utf-8", "replace")

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")[-TAIL_CHARS:]

    def failure_details(self) -> dict[str, Any]:
        """The exit status (None while it runs) and stderr tail, for a failure's details."""
        return {"exit_code": self.returncode, "stderr_tail": self.stderr_tail()}

    def explain(self, failure: RuntimeFailure) -> RuntimeFailure:
        """``failure`` with the exit status and stderr tail in its details and at the end of
        its message (see :func:`exit_note`)."""
        details = self.failure_details()
        failure.details.update(details)
        note = exit_note(details["exit_code"], details["stderr_tail"])
        if note:
            failure.message += note
            failure.args = (failure.message,)
        return failure

    async def stop(self) -> None:
        """Stop the agent and every process below it, and reap them; safe to call many times,
        from anywhere."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        # Shielded: a caller cancelled mid-stop must not leave the tree half-killed.
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        if self.proc.returncode is None and self.interrupt is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.send(self.interrupt), self.kill_grace_s)
            self.close_stdin()
            await self._wait_exit(self.kill_grace_s)
        if self.proc.returncode is None:
            # The supervisor ends every descendant: SIGTERM, then SIGKILL after the grace.
            self._signal_group(signal.SIGTERM)
            await self._wait_exit(self.kill_grace_s + _SUPERVISOR_MARGIN_S)
        if self.proc.returncode is None:
            ownership.kill_tree(self.proc.pid)
        # Always, even after a clean exit: nothing the child started may outlive it.
        self._signal_group(signal.SIGKILL)
        await self._wait_exit(_REAP_S)
        if self.lifeline is not None:
            self.lifeline.close()
        await ownership.OWNER.ended(self.record)
        self.close_stdin()
        done, pending = await asyncio.wait(self._readers, timeout=_DRAIN_S)
        for reader in pending:
            # Something outside the group still holds the pipe open; stop reading it.
            reader.cancel()
        if pending:
            transport = getattr(self.proc, "_transport", None)
            if transport is not None:
                transport.close()
        for reader in done:
            reader.exception()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def _wait_exit(self, timeout: float) -> None:
        await asyncio.wait({self.exited}, timeout=timeout)

    async def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            if self._keep_stdout:
                self._stdout.extend(chunk)
            if self._on_line is not None:
                self._split_lines(chunk)
        if self._on_line is not None and self._partial:
            # The last line, when the output does not end with a line break.
            self._on_line(bytes(self._partial))
            self._partial.clear()

    def _split_lines(self, chunk: bytes) -> None:
        assert self._on_line is not None
        self._partial.extend(chunk)
        start = 0
        while (end := self._partial.find(b"\n", start)) != -1:
            self._on_line(bytes(self._partial[start:end]))
            start = end + 1
        del self._partial[:start]

    async def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self._stderr.extend(chunk)
            if len(self._stderr) > _STDERR_KEEP:
                del self._stderr[: len(self._stderr) - _STDERR_KEEP]


async def _abandon(proc: asyncio.subprocess.Process, kill_grace_s: float) -> None:
    """End a supervisor whose start was cancelled, and everything below it, and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    exited = asyncio.ensure_future(proc.wait())
    await asyncio.wait({exited}, timeout=kill_grace_s + _SUPERVISOR_MARGIN_S)
    if not exited.done():
        ownership.kill_tree(proc.pid)
        await asyncio.wait({exited}, timeout=_REAP_S)
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


def _cannot_start(argv: Sequence[str], cwd: str | None, why: str) -> RuntimeFailure:
    return RuntimeFailure(
        f"cannot start command {list(argv)!r} in {cwd!r}: {why}; "
        "check the agent's runtime argv (or executable) and cwd",
        reason="error",
    )


async def _first_line(lifeline: socket.socket) -> str:
    """The supervisor's report: ``started <pid>`` or ``error <why>`` (empty if it died)."""
    loop = asyncio.get_running_loop()
    data = b""
    while b"\n" not in data:
        chunk = await loop.sock_recv(lifeline, 4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
