"""A fake Claude Code for ``claude -p --input-format stream-json --output-format stream-json``.

It prints the events Claude Code 2.1.x prints (shapes recorded from ``claude`` 2.1.197 against
a local fake Messages API): for each user frame on stdin a ``system``/``init`` event (session
id, tools, model), ``assistant`` messages with content blocks, and a ``result`` (subtype,
is_error, usage, total_cost_usd, duration_ms, num_turns); then it waits for the next frame and
exits on EOF (status 1 if the last turn was an error, like Claude Code). An ``interrupt``
control request gets a ``control_response``, ends the running turn with an
``error_during_execution`` result, and the process goes on.

The mode is the first argument when it is not a flag, else ``$FAKE_CLAUDE_MODE``, else
``reply``:

- ``reply``: the result text is ``heard: <last line of the user text>``.
- ``error``: an API error the way Claude Code reports it (subtype ``success``, ``is_error``).
- ``max-turns``: the result has subtype ``error_max_turns``.
- ``no-result``: print init and exit 0 without a result.
- ``crash``: print init, write an error on stderr and exit 2 mid-turn.
- ``slow``: print init and a partial assistant message, then wait for an interrupt on stdin or
  for ``go`` from the test (on the report connection) to finish the turn.
- ``deaf``: like ``slow``, but an interrupt is read and ignored.
- ``spawn``: call the hub's ``spawn_child`` tool over MCP (the server ``parley`` of the
  ``--mcp-config`` file, read when the process starts, as Claude Code reads it) with the prompt
  ``Sub-task: <last line>`` (a turn whose text has ``Sub-task:`` just replies), report
  ``spawned <child worker id> <its parent> <config file> <its mode>`` (or ``spawn-failed
  <why>``), and reply ``spawned <child worker id>``.

A user frame that arrives while a turn runs (``slow``) is taken into that turn, as Claude Code
takes a message typed while it works: with ``--replay-user-messages`` it is echoed on stdout as
a ``user`` event carrying the frame's ``uuid`` (``isReplay``), the report connection gets
``mail <pid> <its first line>``, and the turn's reply names it (``heard: <last line> + <n>
more``). With ``$FAKE_CLAUDE_QUEUE=1`` such a frame is queued instead, as Claude Code queues a
message that comes too late for the running turn: the turn ends with its own result, then the
frame is echoed and, once the test says ``go`` again, answered by a turn of its own (``heard:
<its last line>``). A queued frame outlives an interrupt as it does in Claude Code: after the
interrupted turn's result it is echoed and, on ``go``, answered by a turn of its own, reported
``answered <pid>``; a user frame that comes while the fake waits for that ``go`` is held
(reported ``held <pid>``) and taken after it. With ``--replay-user-messages`` each turn's own
frame is echoed too, after its ``init``, as Claude Code does.

With ``$FAKE_READY_PORT`` the fake reports to 127.0.0.1:<port>: ``turn <pid> <n> <session>``
when it starts its n-th turn (in ``slow``/``deaf`` once the partial message is out),
``interrupted <request id>`` when it honours an interrupt. With ``$FAKE_CLAUDE_HOME`` sessions
are files there and ``--resume=<id>`` of an unknown id fails as Claude Code does; without it
every id is taken as known. With ``$FAKE_TOOL_PIDS`` each turn starts a tool in a session of its
own first (:mod:`fake_tool`).
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

try:  # run as a program, from this directory
    from fake_tool import start_tool
except ImportError:  # imported by a test for its constants
    from tests.fakes.fake_tool import start_tool

MODEL = "claude-sonnet-4-5"
COST_PER_TURN = 0.000125
TOOLS = ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "WebFetch", "TodoWrite"]


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        "service_tier": "standard",
    }


class Session:
    """The fake's session: its id, its turn counter, and where it is kept."""

    def __init__(self, session_id: str, home: Path | None) -> None:
        self.id = session_id
        self.home = home
        self.turns = 0

    def init(self) -> None:
        emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": os.getcwd(),
                "session_id": self.id,
                "tools": TOOLS,
                "mcp_servers": [],
                "model": MODEL,
                "permissionMode": "default",
                "slash_commands": ["compact", "context", "review"],
                "apiKeySource": "ANTHROPIC_API_KEY",
                "claude_code_version": "2.1.197",
                "output_style": "default",
                "uuid": str(uuid.uuid4()),
            }
        )

    def assistant(self, text: str, *, model: str = MODEL) -> None:
        emit(
            {
                "type": "assistant",
                "message": {
                    "id": f"msg_{uuid.uuid4().hex[:24]}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage(10, 1),
                },
                "parent_tool_use_id": None,
                "session_id": self.id,
                "uuid": str(uuid.uuid4()),
            }
        )

    def result(
        self, text: str | None, *, subtype: str = "success", error: bool = False, **more: Any
    ) -> None:
        event: dict[str, Any] = {
            "type": "result",
            "subtype": subtype,
            "is_error": error,
            "api_error_status": None,
            "duration_ms": 12,
            "duration_api_ms": 9,
            "num_turns": 1,
            "result": text,
            "stop_reason": "end_turn",
            "session_id": self.id,
            # Like Claude Code's: the running total of the process, restated on every result.
            "total_cost_usd": round(COST_PER_TURN * max(1, self.turns), 6),
            "usage": usage(11, 5),
            "modelUsage": {},
            "permission_denials": [],
            "terminal_reason": "completed",
            "uuid": str(uuid.uuid4()),
        }
        event.update(more)
        if text is None:
            del event["result"]  # error_during_execution results carry ``errors`` instead
        emit(event)

    def save(self, text: str) -> None:
        if self.home is not None:
            with (self.home / self.id).open("a") as f:
                f.write(json.dumps({"user": text}) + "\n")


class Inputs:
    """Lines from stdin and from the test's report connection, whichever comes first."""

    def __init__(self, reporter: socket.socket | None) -> None:
        self.reporter = reporter
        self._stdin = b""
        self._test = b""

    def unread(self, frames: list[dict[str, Any]]) -> None:
        """Put ``frames`` back, to be read next, in their order."""
        back = b"".join(json.dumps(frame).encode() + b"\n" for frame in frames)
        self._stdin = back + self._stdin

    def until_go(self) -> None:
        """Wait for ``go`` from the test; a user frame that comes meanwhile is held (reported
        ``held <pid>``) and read after it, as Claude Code holds input while it works."""
        held: list[dict[str, Any]] = []
        while True:
            kind, frame = self.next()
            if kind == "eof":
                sys.exit(1)
            if kind == "go":
                break
            if kind == "frame":
                held.append(frame)
                self.report(f"held {os.getpid()}")
        self.unread(held)

    def report(self, line: str) -> None:
        if self.reporter is not None:
            self.reporter.sendall(line.encode() + b"\n")

    def next(self) -> tuple[str, Any]:
        """("frame", dict), ("go", None) or ("eof", None)."""
        while True:
            if b"\n" in self._stdin:
                line, self._stdin = self._stdin.split(b"\n", 1)
                if line.strip():
                    return "frame", json.loads(line)
                continue
            if b"\n" in self._test:
                line, self._test = self._test.split(b"\n", 1)
                return line.decode().strip(), None
            sources: list[Any] = [0] + ([self.reporter] if self.reporter is not None else [])
            ready, _, _ = select.select(sources, [], [])
            if 0 in ready:
                data = os.read(0, 65536)
                if not data:
                    return "eof", None
                self._stdin += data
            if self.reporter is not None and self.reporter in ready:
                self._test += self.reporter.recv(65536)


def user_text(frame: dict[str, Any]) -> str:
    content = frame["message"]["content"]
    return content if isinstance(content, str) else content[-1]["text"]


def mode_and_resume(args: list[str]) -> tuple[str, str | None]:
    mode = os.environ.get("FAKE_CLAUDE_MODE", "reply")
    if args and not args[0].startswith("-"):
        mode = args[0]
    resume = None
    for arg in args:
        if arg.startswith("--resume="):
            resume = arg.split("=", 1)[1]
    return mode, resume


def mcp_server(args: list[str]) -> dict[str, Any] | None:
    """The ``parley`` server of the ``--mcp-config`` file, read now: the file is the turn's
    and is removed when that turn ends. Its path and mode are kept for the report."""
    if "--mcp-config" not in args:
        return None
    path = args[args.index("--mcp-config") + 1]
    with open(path) as f:
        server: dict[str, Any] = json.load(f)["mcpServers"]["parley"]
    server["file"] = f"{path} {os.stat(path).st_mode & 0o777:o}"
    return server


MCP: dict[str, Any] | None = None
REPLAY = False


def main() -> int:
    global MCP, REPLAY
    mode, resume = mode_and_resume(sys.argv[1:])
    MCP = mcp_server(sys.argv[1:])
    REPLAY = "--replay-user-messages" in sys.argv[1:]
    home = Path(os.environ["FAKE_CLAUDE_HOME"]) if os.environ.get("FAKE_CLAUDE_HOME") else None
    if resume and home is not None and not (home / resume).exists():
        # What Claude Code 2.1 does with an id it has no transcript for, before reading stdin.
        missing = f"No conversation found with session ID: {resume}"
        Session(resume, None).result(
            None,
            subtype="error_during_execution",
            error=True,
            duration_ms=0,
            num_turns=0,
            stop_reason=None,
            errors=[missing],
        )
        sys.stderr.write(missing + "\n")
        return 1
    session = Session(resume or str(uuid.uuid4()), home)
    port = os.environ.get("FAKE_READY_PORT")
    inputs = Inputs(socket.create_connection(("127.0.0.1", int(port))) if port else None)
    failed = False
    while True:
        kind, frame = inputs.next()
        if kind == "eof":
            return 1 if failed else 0
        if kind != "frame":
            continue
        if frame.get("type") == "control_request":
            # Between turns there is nothing to stop: Claude Code acknowledges and waits.
            emit(control_response(frame))
            continue
        failed = take_turn(mode, session, inputs, user_text(frame), frame)


def control_response(frame: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": frame["request_id"]},
    }


def take_turn(
    mode: str, session: Session, inputs: Inputs, text: str, frame: dict[str, Any] | None = None
) -> bool:
    """Answer one user message; whether the turn ended as an error."""
    session.turns += 1
    session.save(text)
    session.init()
    if REPLAY and frame is not None:
        echo(session, frame)
    start_tool()
    last_line = text.strip().splitlines()[-1]
    if mode == "no-result":
        sys.exit(0)
    if mode == "crash":
        sys.stderr.write("fatal: the session store is corrupt\n")
        sys.exit(2)
    if mode in ("slow", "deaf"):
        session.assistant("Let me think about")
        inputs.report(f"turn {os.getpid()} {session.turns} {session.id}")
        return wait_in_turn(mode, session, inputs, last_line)
    inputs.report(f"turn {os.getpid()} {session.turns} {session.id}")
    if mode == "spawn" and "Sub-task:" not in text:  # a child it spawned just replies
        return spawn(session, inputs, last_line)
    if mode == "error":
        session.assistant("API Error: 529 overloaded", model="<synthetic>")
        session.result(
            "API Error: 529 overloaded",
            error=True,
            api_error_status=529,
            stop_reason="stop_sequence",
        )
        return True
    if mode == "max-turns":
        session.result("", subtype="error_max_turns", error=True)
        return True
    session.assistant(f"heard: {last_line}")
    session.result(f"heard: {last_line}")
    return False


def spawn(session: Session, inputs: Inputs, last_line: str) -> bool:
    if MCP is None:
        inputs.report("spawn-failed no-mcp-config")
        session.result("no parley MCP server", error=True)
        return True
    from hub_mcp import call_tool  # a sibling module: this script runs from tests/fakes

    ok, got = call_tool(
        MCP["url"],
        MCP.get("headers", {}),
        "spawn_child",
        {"prompt": f"Sub-task: {last_line}", "inherit_context": False},
    )
    if not ok:
        inputs.report(f"spawn-failed {got}")
        session.result(f"spawn failed: {got}", error=True)
        return True
    inputs.report(f"spawned {got['id']} {got.get('parent_worker_id')} {MCP['file']}")
    session.assistant(f"spawned {got['id']}")
    session.result(f"spawned {got['id']}")
    return False


def echo(session: Session, frame: dict[str, Any]) -> None:
    """The echo of a user frame Claude Code takes (``--replay-user-messages``), with its uuid."""
    emit(
        {
            "type": "user",
            "message": frame["message"],
            "parent_tool_use_id": None,
            "session_id": session.id,
            "uuid": frame.get("uuid") or str(uuid.uuid4()),
            "isReplay": True,
        }
    )


def take_mail(session: Session, inputs: Inputs, frame: dict[str, Any]) -> str:
    """A user frame that came while a turn runs: taken into the turn (echoed when asked)."""
    text = user_text(frame)
    session.save(text)
    if REPLAY:
        echo(session, frame)
    first = text.strip().splitlines()[0] if text.strip() else ""
    inputs.report(f"mail {os.getpid()} {first}")
    return text


def wait_in_turn(mode: str, session: Session, inputs: Inputs, last_line: str) -> bool:
    taken = 0
    queued: list[dict[str, Any]] = []
    while True:
        kind, frame = inputs.next()
        if kind == "eof":
            sys.exit(1)
        if kind == "go":
            more = f" + {taken} more" if taken else ""
            session.assistant(f"heard: {last_line}{more}")
            session.result(f"heard: {last_line}{more}")
            answer_queued(session, inputs, queued, after_interrupt=False)
            return False
        if kind == "frame" and frame.get("type") == "user":
            if os.environ.get("FAKE_CLAUDE_QUEUE") == "1":
                queued.append(frame)
                inputs.report(f"queued {os.getpid()}")
                continue
            take_mail(session, inputs, frame)
            taken += 1
            continue
        if kind != "frame" or frame.get("type") != "control_request":
            continue
        if mode == "deaf":
            continue
        emit(control_response(frame))
        inputs.report(f"interrupted {frame['request_id']}")
        emit(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{"type": "text", "text": "[Request interrupted by user]"}],
                },
                "parent_tool_use_id": None,
                "session_id": session.id,
                "uuid": str(uuid.uuid4()),
            }
        )
        session.result(
            None,
            subtype="error_during_execution",
            error=True,
            num_turns=2,
            stop_reason=None,
            terminal_reason="aborted_streaming",
            usage=usage(0, 0),
            errors=["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"],
        )
        # A queued message outlives the interrupt: Claude Code answers it next, on its own.
        answer_queued(session, inputs, queued, after_interrupt=True)
        return True


def answer_queued(
    session: Session, inputs: Inputs, queued: list[dict[str, Any]], *, after_interrupt: bool
) -> None:
    """Each queued message gets a turn of its own, once the test says ``go`` again (a frame
    that comes meanwhile is held); after an interrupt, ``answered <pid>`` is reported after
    its result."""
    for later in queued:
        text = take_mail(session, inputs, later)
        inputs.until_go()
        session.init()
        session.assistant(f"heard: {text.strip().splitlines()[-1]}")
        session.result(f"heard: {text.strip().splitlines()[-1]}")
        if after_interrupt:
            inputs.report(f"answered {os.getpid()}")


if __name__ == "__main__":
    sys.exit(main())
