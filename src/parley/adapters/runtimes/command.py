"""The ``command`` runtime: an agent that is a command-line program.

Three protocols, chosen per agent:

- ``text``: the rendered prompt on stdin, the reply on stdout — any script or CLI, run once per
  turn.
- ``claude-stream-json``: Claude Code in bidirectional stream-json mode
  (:mod:`parley.adapters.runtimes.claude_code`). By default (``keep_alive``) one process per
  logical session stays alive between turns (:mod:`parley.adapters.runtimes.live_sessions`);
  with ``keep_alive: false`` a process per turn, resumed with ``--resume=<id>``.
- ``codex-json``: ``codex exec --json`` (:mod:`parley.adapters.runtimes.codex`), one process per
  turn; the thread id is kept and the next turn runs ``codex exec ... resume <thread id>``.

A session or thread id the CLI no longer knows is dropped and the turn starts afresh once; the
turn's timings then carry ``resumed_fresh``. Every child runs under a supervisor that owns all
it starts (:mod:`parley.adapters.runtimes.supervise`), stopped whole when its turn (or, kept
alive, its session or its worker) ends, however it ends, and when the hub dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parley.adapters.runtimes import codex, guard, hub_wiring
from parley.adapters.runtimes.child import ChildProcess, json_event, start_afresh
from parley.adapters.runtimes.claude_code import (
    CLAUDE_SESSION_KEY,
    claude_code_argv,
    claude_interrupt_frame,
    claude_reply,
    claude_state,
    claude_user_frame,
    is_stale_session,
)
from parley.adapters.runtimes.codex import CODEX_THREAD_KEY, codex_argv, codex_reply, codex_state
from parley.adapters.runtimes.endpoint import parse_config
from parley.adapters.runtimes.live_sessions import ClaudeSessions
from parley.adapters.runtimes.race import ProviderReply, race_turn
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Turn, TurnResult

CommandProtocol = Literal["text", "claude-stream-json", "codex-json"]
CommandPreset = Literal["claude-code", "codex"]
McpProfile = Literal["default", "mail", "discuss", "rooms", "workers"]


class CommandConfig(BaseModel):
    """``{"kind": "command", "argv": [...], "protocol": "text", "cwd": ..., "env": {...},
    "timeout_s": ..., "kill_grace_s": 2}``, or a preset (``"preset": "claude-code"`` /
    ``"codex"``, optionally with the ``executable`` to run) that builds the real command line."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] | None = None
    preset: CommandPreset | None = None
    executable: str | None = None
    """The program a preset runs (default ``claude`` / ``codex`` from ``PATH``)."""
    protocol: CommandProtocol | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0)
    kill_grace_s: float = Field(default=2.0, ge=0, le=60)
    resume: bool = True
    keep_alive: bool | None = None
    """One Claude Code process per logical session, kept between turns (default for the
    ``claude-stream-json`` protocol); ``false`` starts one per turn."""
    idle_s: float = Field(default=600.0, gt=0)
    """A kept-alive process unused this long is stopped; the next turn resumes its session."""
    login_check: bool = True
    """The ``codex`` preset runs ``codex login status`` before its first turn and fails fast
    when Codex has no credentials."""
    max_network_waits: int | None = Field(default=3, ge=1)
    """Codex turns fail after this many "waiting for network" reports (None: never)."""
    model: str | None = None
    permission_mode: str | None = None
    sandbox: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    hub_mcp: bool = True
    """Connect the command to this hub for each turn: the hub's address and the turn's own
    token (never stored here) in its environment, and a preset's CLI given the hub's MCP
    server; ``false`` gives neither (the CLI's own MCP config is left as it is)."""
    mcp_profile: McpProfile = "workers"
    """The MCP profile (tool set) a preset's CLI is given."""

    @model_validator(mode="after")
    def _one_command(self) -> CommandConfig:
        if (self.argv is None) == (self.preset is None):
            raise ValueError("give either 'argv' (a list of strings) or 'preset', not both")
        if self.argv is not None and (not self.argv or not self.argv[0]):
            raise ValueError("'argv' must name the program to run")
        if self.executable is not None and (self.preset is None or not self.executable):
            raise ValueError(
                "'executable' names the program of a preset; with 'argv' the program is argv[0]"
            )
        if self.keep_alive and self.effective_protocol != "claude-stream-json":
            raise ValueError("'keep_alive' applies to the claude-stream-json protocol only")
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

    @property
    def effective_keep_alive(self) -> bool:
        if self.keep_alive is not None:
            return self.keep_alive
        return self.effective_protocol == "claude-stream-json"


class CommandRuntime:
    """Runs the agent's command under the shared deadline and cancel rules: once per turn, or
    (Claude Code, kept alive) one process per logical session."""

    kind = "command"

    def __init__(
        self, config: CommandConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.protocol = config.effective_protocol
        guard.check_command(self._argv(None))
        label = config.preset or os.path.basename(self._argv(None)[0])
        self.model_route = f"command:{label}" + (f":{config.model}" if config.model else "")
        self._codex_logged_in = False
        # The --mcp-config file of each turn in flight (claude-code preset), by invocation.
        self._mcp_configs: dict[str, Path] = {}
        self.sessions: ClaudeSessions | None = None
        if config.effective_keep_alive:
            self.sessions = ClaudeSessions(
                argv_for=self._argv,
                env=self._child_env,
                cwd=config.cwd,
                kill_grace_s=config.kill_grace_s,
                idle_s=config.idle_s,
                resume_id=self._resume_id,
                route=self.model_route,
                timeout_s=config.timeout_s,
                clock=clock,
            )

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CommandRuntime:
        return cls(parse_config(CommandConfig, config))

    async def respond(self, turn: Turn) -> TurnResult:
        with self._wired(turn):
            return await self._respond(turn)

    @contextlib.contextmanager
    def _wired(self, turn: Turn) -> Iterator[None]:
        """The turn's MCP config file for Claude Code, which lives as long as the turn."""
        cfg = self.config
        if cfg.preset != "claude-code" or not cfg.hub_mcp or turn.hub is None:
            yield
            return
        with hub_wiring.claude_mcp_config(turn.hub, cfg.mcp_profile) as path:
            self._mcp_configs[turn.invocation_id] = path
            try:
                yield
            finally:
                del self._mcp_configs[turn.invocation_id]

    async def _respond(self, turn: Turn) -> TurnResult:
        if self.sessions is not None:
            return await self.sessions.respond(turn)
        children: list[ChildProcess] = []
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

    def _argv(self, resume: str | None, turn: Turn | None = None) -> list[str]:
        cfg = self.config
        access = turn.hub if turn is not None and cfg.hub_mcp else None
        if cfg.preset == "claude-code":
            config = self._mcp_configs.get(turn.invocation_id) if turn is not None else None
            wiring = hub_wiring.claude_mcp_args(config) if config is not None else []
            return claude_code_argv(
                executable=cfg.executable or "claude",
                model=cfg.model,
                permission_mode=cfg.permission_mode,
                extra_args=[*wiring, *cfg.extra_args],
                resume=resume,
            )
        if cfg.preset == "codex":
            wiring = hub_wiring.codex_mcp_args(access, cfg.mcp_profile) if access else []
            return codex_argv(
                executable=cfg.executable or "codex",
                model=cfg.model,
                sandbox=cfg.sandbox,
                skip_git_repo_check=True,
                extra_args=[*wiring, *cfg.extra_args],
                resume=resume,
            )
        argv = list(cfg.argv or ())
        if self.protocol == "claude-stream-json" and resume:
            argv.append(f"--resume={resume}")
        return argv

    def _child_env(self, turn: Turn | None = None) -> dict[str, str]:
        """The hub's environment as it is now, with the agent's ``env`` on top and, in a turn,
        where the hub is and the turn's token (:mod:`.hub_wiring`)."""
        access = turn.hub if turn is not None and self.config.hub_mcp else None
        wiring = hub_wiring.hub_env(access, self.config.mcp_profile)
        return {**os.environ, **self.config.env, **wiring}

    def _resume_id(self, turn: Turn) -> str | None:
        if not self.config.resume:
            return None
        key = {"claude-stream-json": CLAUDE_SESSION_KEY, "codex-json": CODEX_THREAD_KEY}.get(
            self.protocol
        )
        value = turn.runtime_state.get(key) if key else None
        return str(value) if value else None

    async def _run(self, turn: Turn, children: list[ChildProcess]) -> ProviderReply:
        if self.config.preset == "codex" and self.config.login_check:
            await self._check_codex_login(turn)
        resume = self._resume_id(turn)
        try:
            return await self._run_once(turn, children, resume)
        except RuntimeFailure as exc:
            if resume is None or not exc.details.get("stale_session"):
                raise
        return await start_afresh(
            self.model_route, resume, lambda: self._run_once(turn, children, None)
        )

    async def _check_codex_login(self, turn: Turn) -> None:
        if self._codex_logged_in:
            return
        env = self._child_env()
        if not codex.needs_login_check(env, self.config.extra_args):
            return
        await codex.check_login(
            self._argv(None)[0],
            cwd=self.config.cwd or turn.agent.workspace,
            env=env,
            kill_grace_s=self.config.kill_grace_s,
        )
        self._codex_logged_in = True

    async def _run_once(
        self, turn: Turn, children: list[ChildProcess], resume: str | None
    ) -> ProviderReply:
        text = self.protocol == "text"
        claude = self.protocol == "claude-stream-json"
        watch = codex.NetworkWatch(self.config.max_network_waits)
        result_seen = asyncio.Event()
        # The JSON protocols' events, each line read once as it arrives (the text protocol
        # keeps the whole stdout instead); the session or thread id is reported at once.
        events: list[dict[str, Any]] = []
        state_of = claude_state if claude else codex_state

        def on_line(line: bytes) -> None:
            event = json_event(line)
            if event is None:
                return
            events.append(event)
            state = state_of(event)
            if state is not None:
                turn.report_state(state)
            if claude:
                if event.get("type") == "result":
                    result_seen.set()
            else:
                watch.on_event(event)

        child = await ChildProcess.start(
            self._argv(resume, turn),
            cwd=self.config.cwd or turn.agent.workspace,
            env=self._child_env(turn),
            kill_grace_s=self.config.kill_grace_s,
            on_line=None if text else on_line,
            keep_stdout=text,
        )
        children.append(child)
        if claude:
            child.interrupt = claude_interrupt_frame(f"parley-{turn.invocation_id}")
            await child.send(claude_user_frame(turn.prompt.render()))
            # Claude Code waits for the next message after a result; closing stdin then lets
            # it exit. Until then stdin stays open for the interrupt a cancel sends.
            await _first(child, result_seen)
        else:
            await child.send(turn.prompt.render().encode())
        child.close_stdin()
        if self.protocol == "codex-json" and await _first(child, watch.gave_up):
            await child.stop()
            raise watch.failure()
        await child.wait()
        await child.stop()  # stragglers in the group die, and the pipes drain to the end
        return self._reply(child, events, stale_possible=resume is not None)

    def _reply(
        self, child: ChildProcess, events: list[dict[str, Any]], *, stale_possible: bool
    ) -> ProviderReply:
        failed = child.returncode != 0
        if self.protocol == "text":
            if failed:
                raise child.explain(RuntimeFailure(f"{self.model_route} failed", reason="error"))
            return ProviderReply(text=child.stdout_text().strip())
        try:
            if self.protocol == "claude-stream-json":
                reply = claude_reply(events)
            else:
                reply = codex_reply(events)
            if failed:
                raise RuntimeFailure(f"{self.model_route} failed", reason="error")
        except RuntimeFailure as exc:
            child.explain(exc)
            if stale_possible and self._names_stale_id(exc):
                exc.details["stale_session"] = True
            raise
        return reply

    def _names_stale_id(self, failure: RuntimeFailure) -> bool:
        if self.protocol == "claude-stream-json":
            return is_stale_session(failure)
        return codex.is_stale_thread(str(failure.details.get("stderr_tail") or ""))

    def live_pid(self, session_id: str) -> int | None:
        """The pid of the Claude Code process kept for ``session_id``, if there is one."""
        return self.sessions.pid(session_id) if self.sessions is not None else None

    async def close_idle(self) -> list[str]:
        """Stop kept-alive processes unused for ``idle_s``; return their logical sessions."""
        return await self.sessions.close_idle() if self.sessions is not None else []

    async def end_session(self, session_id: str) -> None:
        """Stop the process kept for ``session_id`` (see :meth:`ClaudeSessions.end`)."""
        if self.sessions is not None:
            await self.sessions.end(session_id)

    async def aclose(self) -> None:
        """Stop every kept-alive process."""
        if self.sessions is not None:
            await self.sessions.aclose()


async def _first(child: ChildProcess, event: asyncio.Event) -> bool:
    """Wait until ``event`` is set or the child exits; whether the event came first."""
    waiter = asyncio.ensure_future(event.wait())
    waiting: set[asyncio.Future[Any]] = {child.exited, waiter}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    return event.is_set() and not child.exited.done()
