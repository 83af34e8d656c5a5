"""The ``command`` runtime: an agent that is a command-line program, run once per turn.

Three protocols, chosen per agent:

- ``text``: the rendered prompt on stdin, the reply on stdout — any script or CLI.
- ``claude-stream-json``: Claude Code in bidirectional stream-json mode (see
  :func:`claude_code_argv`): one user message as an NDJSON frame on stdin, NDJSON events on
  stdout, the final ``result`` event is the reply; its ``session_id`` is kept as runtime state
  and the next turn resumes it with ``--resume=<id>``. Cancel sends an ``interrupt`` control
  request before any signal.
- ``codex-json``: ``codex exec --json`` (see :func:`codex_argv`): the prompt on stdin, JSONL
  events on stdout, the last ``agent_message`` item is the reply; the thread id is kept and the
  next turn runs ``codex exec ... resume <thread id>``.

Each child starts in its own process group and the whole group is stopped when the turn ends,
however it ends (SIGTERM, then SIGKILL after a grace period, then reaped), so nothing a turn
started outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parley.adapters.runtimes import guard
from parley.adapters.runtimes.endpoint import parse_config
from parley.adapters.runtimes.race import ProviderReply, race_turn
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Turn, TurnResult, Usage

CommandProtocol = Literal["text", "claude-stream-json", "codex-json"]
CommandPreset = Literal["claude-code", "codex"]

CLAUDE_SESSION_KEY = "claude_session_id"
CODEX_THREAD_KEY = "codex_thread_id"
TAIL_CHARS = 2000
_STDERR_KEEP = 16 * 1024
_REAP_S = 5.0
_DRAIN_S = 1.0


# --- Claude Code --------------------------------------------------------------------------


def claude_code_argv(
    *,
    executable: str = "claude",
    model: str | None = None,
    resume: str | None = None,
    permission_mode: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of Claude Code in bidirectional stream-json mode.

    ``claude -p --output-format stream-json --input-format stream-json --verbose`` reads user
    messages as NDJSON frames on stdin (``{"type": "user", "message": {"role": "user",
    "content": ...}}``) and writes NDJSON events on stdout (``system``/``init``, ``assistant``,
    ``user``, and a final ``result`` with ``result``, ``session_id``, ``is_error``, ``subtype``
    and ``usage``); stream-json output requires ``--verbose``. ``--resume=<session id>``
    continues an earlier session; the ``=`` form binds the value to the flag, so an id can never
    be read as another flag.
    """
    argv = [
        executable,
        "-p",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--verbose",
    ]
    if model:
        argv += ["--model", model]
    if permission_mode:
        argv += ["--permission-mode", permission_mode]
    argv += list(extra_args)
    if resume:
        argv.append(f"--resume={resume}")
    return argv


def claude_user_frame(text: str) -> bytes:
    """One user message for Claude Code's stream-json input, as an NDJSON line."""
    frame = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }
    return (json.dumps(frame, ensure_ascii=False) + "\n").encode()


def claude_interrupt_frame(request_id: str) -> bytes:
    """The control request that asks Claude Code to stop the running turn; it then ends the
    turn with a ``result`` of subtype ``error_during_execution`` and keeps the session
    resumable."""
    frame = {
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": "interrupt"},
    }
    return (json.dumps(frame) + "\n").encode()


def _json_events(lines: Iterable[str | bytes]) -> Iterable[dict[str, Any]]:
    """The JSON objects among ``lines``; other output (debug noise) is skipped."""
    for raw in lines:
        line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event


_CLAUDE_STOP_SUBTYPES = frozenset(
    {"error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries"}
)


def parse_claude_stream(lines: Iterable[str | bytes]) -> ProviderReply:
    """The reply in Claude Code's stream-json output: the final ``result`` event's ``result``
    text, usage and ``session_id`` (kept for ``--resume``).

    Raises :class:`RuntimeFailure` when no ``result`` arrived, or the result is an error
    (``is_error``, or a subtype other than ``success``): a limit reached is a non-completed
    stop (reason ``stop_reason``), anything else reason ``error``.
    """
    session_id: str | None = None
    result: dict[str, Any] | None = None
    for event in _json_events(lines):
        session_id = event.get("session_id") or session_id
        if event.get("type") == "result":
            result = event
    if result is None:
        raise RuntimeFailure(
            "Claude Code ended without a result event", reason="error", session_id=session_id
        )
    subtype = str(result.get("subtype", ""))
    if result.get("is_error") or subtype != "success":
        detail = result.get("result") or "; ".join(map(str, result.get("errors") or ())) or subtype
        raise RuntimeFailure(
            f"Claude Code ended its turn with {subtype!r}: {str(detail)[:TAIL_CHARS]}",
            reason="stop_reason" if subtype in _CLAUDE_STOP_SUBTYPES else "error",
            stop_reason=subtype,
            session_id=session_id,
        )
    usage = result.get("usage") or {}
    return ProviderReply(
        text=str(result.get("result") or ""),
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        ),
        runtime_state={CLAUDE_SESSION_KEY: session_id} if session_id else None,
    )


def _is_claude_result(line: bytes) -> bool:
    return any(event.get("type") == "result" for event in _json_events([line]))


# --- Codex --------------------------------------------------------------------------------


def codex_argv(
    *,
    executable: str = "codex",
    model: str | None = None,
    resume: str | None = None,
    sandbox: str | None = None,
    skip_git_repo_check: bool = False,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of Codex non-interactive mode with JSONL events.

    ``codex exec --json [flags] -`` reads the prompt from stdin (``-``) and writes JSON Lines:
    ``thread.started`` (``thread_id``), ``turn.started``, ``item.*`` (the reply is an
    ``item.completed`` whose item has type ``agent_message``), then ``turn.completed`` (with
    ``usage``) or ``turn.failed`` (with ``error.message``). ``codex exec [flags] resume <thread
    id> -`` continues a thread; flags go before ``resume`` since only the conversation is kept.
    """
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


def parse_codex_stream(lines: Iterable[str | bytes]) -> ProviderReply:
    """The reply in ``codex exec --json`` output: the last ``agent_message`` item, the
    ``turn.completed`` usage and the thread id. ``turn.failed``, an ``error`` event or a
    missing ``turn.completed`` raise :class:`RuntimeFailure`."""
    thread_id: str | None = None
    text = ""
    usage: dict[str, Any] | None = None
    errors: list[str] = []
    for event in _json_events(lines):
        kind = event.get("type")
        if kind in ("thread.started", "thread.resumed"):
            thread_id = event.get("thread_id") or thread_id
        elif kind == "item.completed":
            item = event.get("item") or {}
            if item.get("type") == "agent_message":
                text = str(item.get("text") or "")
        elif kind == "turn.completed":
            usage = event.get("usage") or {}
        elif kind == "turn.failed":
            errors.append(str((event.get("error") or {}).get("message", "turn failed")))
        elif kind == "error":
            errors.append(str(event.get("message", "error")))
    if errors or usage is None:
        reason = "; ".join(errors) or "the output ended without turn.completed"
        raise RuntimeFailure(
            f"Codex failed: {reason[:TAIL_CHARS]}", reason="error", thread_id=thread_id
        )
    return ProviderReply(
        text=text,
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        ),
        runtime_state={CODEX_THREAD_KEY: thread_id} if thread_id else None,
    )


# --- The runtime --------------------------------------------------------------------------


class CommandConfig(BaseModel):
    """``{"kind": "command", "argv": [...], "protocol": "text", "cwd": ..., "env": {...},
    "timeout_s": ..., "kill_grace_s": 2}``, or a preset (``"preset": "claude-code"`` /
    ``"codex"`` with ``model``, ``permission_mode``/``sandbox`` and ``extra_args``) that builds
    the real command line."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] | None = None
    preset: CommandPreset | None = None
    protocol: CommandProtocol | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0)
    kill_grace_s: float = Field(default=2.0, ge=0, le=60)
    resume: bool = True
    model: str | None = None
    permission_mode: str | None = None
    sandbox: str | None = None
    extra_args: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_command(self) -> CommandConfig:
        if (self.argv is None) == (self.preset is None):
            raise ValueError("give either 'argv' (a list of strings) or 'preset', not both")
        if self.argv is not None and (not self.argv or not self.argv[0]):
            raise ValueError("'argv' must name the program to run")
        return self

    @property
    def effective_protocol(self) -> CommandProtocol:
        if self.protocol is not None:
            return self.protocol
        if self.preset == "claude-code":
            return "claude-stream-json"
        if self.preset == "codex":
            return "codex-json"
        return "text"


class CommandRuntime:
    """Runs the agent's command once per turn under the shared deadline and cancel rules."""

    kind = "command"

    def __init__(self, config: CommandConfig) -> None:
        self.config = config
        self.protocol = config.effective_protocol
        guard.check_command(self._argv(None))
        label = config.preset or os.path.basename(self._argv(None)[0])
        self.model_route = f"command:{label}" + (f":{config.model}" if config.model else "")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CommandRuntime:
        return cls(parse_config(CommandConfig, config))

    async def respond(self, turn: Turn) -> TurnResult:
        children: list[_Child] = []
        try:
            return await race_turn(
                turn,
                lambda: self._run(turn, children),
                route=self.model_route,
                timeout_s=self.config.timeout_s,
            )
        finally:
            # The provider task may have been cancelled or abandoned; the group dies here
            # either way, before the turn's outcome is handed back.
            for child in children:
                await child.stop()

    def _argv(self, turn: Turn | None) -> list[str]:
        state = turn.runtime_state if turn is not None and self.config.resume else {}
        cfg = self.config
        if cfg.preset == "claude-code":
            return claude_code_argv(
                model=cfg.model,
                permission_mode=cfg.permission_mode,
                extra_args=cfg.extra_args,
                resume=state.get(CLAUDE_SESSION_KEY),
            )
        if cfg.preset == "codex":
            return codex_argv(
                model=cfg.model,
                sandbox=cfg.sandbox,
                skip_git_repo_check=True,
                extra_args=cfg.extra_args,
                resume=state.get(CODEX_THREAD_KEY),
            )
        argv = list(cfg.argv or ())
        session = state.get(CLAUDE_SESSION_KEY)
        if self.protocol == "claude-stream-json" and session:
            argv.append(f"--resume={session}")
        return argv

    async def _run(self, turn: Turn, children: list[_Child]) -> ProviderReply:
        argv = self._argv(turn)
        claude = self.protocol == "claude-stream-json"
        child = await _Child.start(
            argv,
            cwd=self.config.cwd or turn.agent.workspace,
            env={**os.environ, **self.config.env},
            kill_grace_s=self.config.kill_grace_s,
            watch=_is_claude_result if claude else None,
        )
        children.append(child)
        if claude:
            child.interrupt = claude_interrupt_frame(f"parley-{turn.invocation_id}")
            await child.send(claude_user_frame(turn.prompt.render()))
            # Claude Code waits for the next message after a result; closing stdin lets it exit.
            await child.until_watched()
        else:
            await child.send(turn.prompt.render().encode())
        child.close_stdin()
        code = await child.wait()
        await child.stop()  # stragglers in the group die, and the pipes drain to the end
        return self._reply(child, code)

    def _reply(self, child: _Child, code: int) -> ProviderReply:
        stderr_tail = child.stderr_tail()
        details: dict[str, Any] = {"exit_code": code, "stderr_tail": stderr_tail}
        if self.protocol == "text":
            if code != 0:
                raise RuntimeFailure(
                    f"{self.model_route} exited with status {code}: {stderr_tail[-500:]}",
                    reason="error",
                    **details,
                )
            return ProviderReply(text=child.stdout_text().strip())
        parse = parse_claude_stream if self.protocol == "claude-stream-json" else parse_codex_stream
        try:
            reply = parse(child.stdout_text().splitlines())
        except RuntimeFailure as exc:
            exc.details.update(details)
            raise
        if code != 0:
            raise RuntimeFailure(
                f"{self.model_route} exited with status {code}: {stderr_tail[-500:]}",
                reason="error",
                **details,
            )
        return reply

    async def aclose(self) -> None:
        return None


class _Child:
    """One turn's child process, its process group, and what it wrote."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        *,
        kill_grace_s: float,
        watch: Callable[[bytes], bool] | None,
    ) -> None:
        self.proc = proc
        self.kill_grace_s = kill_grace_s
        self.interrupt: bytes | None = None
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._watch = watch
        self._scanned = 0
        self._watched = asyncio.Event()
        self._exit = asyncio.ensure_future(proc.wait())
        self._readers = [
            asyncio.ensure_future(self._pump_stdout()),
            asyncio.ensure_future(self._pump_stderr()),
        ]
        self._stopping: asyncio.Future[None] | None = None

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        kill_grace_s: float,
        watch: Callable[[bytes], bool] | None,
    ) -> _Child:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=env,
                # Its own process group, so a timeout can stop everything it started.
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeFailure(
                f"cannot start command {list(argv)!r} in {cwd!r}: {exc}; "
                "check the agent's runtime argv and cwd",
                reason="error",
            ) from exc
        return cls(proc, kill_grace_s=kill_grace_s, watch=watch)

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

    async def until_watched(self) -> None:
        """Wait until the watched stdout line arrives or the child exits."""
        watched = asyncio.ensure_future(self._watched.wait())
        try:
            await asyncio.wait({watched, self._exit}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watched.cancel()

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def stdout_text(self) -> str:
        return self._stdout.decode("utf-8", "replace")

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")[-TAIL_CHARS:]

    async def stop(self) -> None:
        """Stop the whole process group and reap it; safe to call many times, from anywhere."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        # Shielded: a caller cancelled mid-stop must not leave the group half-killed.
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        if self.proc.returncode is None and self.interrupt is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.send(self.interrupt), self.kill_grace_s)
            self.close_stdin()
            await self._wait_exit(self.kill_grace_s)
        if self.proc.returncode is None:
            self._signal_group(signal.SIGTERM)
            await self._wait_exit(self.kill_grace_s)
        # Always, even after a clean exit: nothing the turn started may outlive it.
        self._signal_group(signal.SIGKILL)
        await self._wait_exit(_REAP_S)
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
        await asyncio.wait({self._exit}, timeout=timeout)

    async def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self._stdout.extend(chunk)
            if self._watch is not None:
                self._scan_lines()

    def _scan_lines(self) -> None:
        assert self._watch is not None
        while (end := self._stdout.find(b"\n", self._scanned)) != -1:
            line = bytes(self._stdout[self._scanned : end])
            self._scanned = end + 1
            if self._watch(line):
                self._watched.set()

    async def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self._stderr.extend(chunk)
            if len(self._stderr) > _STDERR_KEEP:
                del self._stderr[: len(self._stderr) - _STDERR_KEEP]
