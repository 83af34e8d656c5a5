"""A fake Codex for ``codex exec --json [flags] [resume <thread id>] -`` and ``codex login status``.

It prints the JSON Lines ``codex exec --json`` prints (shapes recorded from codex-cli 0.171.0
against a local fake Responses API): ``thread.started``, ``turn.started``, ``item.started`` /
``item.completed`` (``reasoning``, ``command_execution``, ``agent_message``), ``error`` while it
retries, then ``turn.completed`` with ``usage`` or ``turn.failed``. The mode is
``fake-mode=<mode>`` in the prompt, else ``$FAKE_CODEX_MODE``, else ``reply``:

- ``reply``: the agent message is ``heard: <last line of the prompt>``.
- ``reconnect``: an ``error`` "Reconnecting... 1/5 (…)" first, then the reply; exit 0.
- ``fail``: an ``error`` and ``turn.failed`` (a 401 from the provider); exit 1.
- ``offline``: "Reconnecting... waiting for network" errors, then it waits until stopped, as
  Codex does without a connection.
- ``hang``: report, then wait until stopped.
- ``hang-new``: like ``hang`` in a new thread; a resumed thread replies.
- ``spawn``: call the hub's ``spawn_child`` over MCP, as the server ``parley`` that ``-c
  mcp_servers.parley.*`` declares (its ``url``, and the bearer token in the environment variable
  ``bearer_token_env_var`` names); like ``codex exec``, it refuses the call unless
  ``default_tools_approval_mode`` is ``"approve"``. Reports ``spawned <child> <parent>`` or
  ``spawn-failed <why>`` and replies ``spawned <child>``.

With ``$FAKE_CODEX_HOME`` threads are files there and ``resume`` of an unknown id fails as Codex
does (stderr "no rollout found", exit 1, no events); without it every id is known.
``login status`` succeeds only with ``$FAKE_CODEX_LOGGED_IN=1``. With ``$FAKE_READY_PORT`` it
reports ``login <pid>`` for a login check and ``turn <pid> <thread id> new|resumed`` for a turn.
With ``$FAKE_TOOL_PIDS`` each turn starts a tool in a session of its own first (:mod:`fake_tool`).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

try:  # run as a program, from this directory
    from fake_tool import start_tool
except ImportError:  # imported by a test for its constants
    from tests.fakes.fake_tool import start_tool


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def report(line: str) -> None:
    port = os.environ.get("FAKE_READY_PORT")
    if port:
        with socket.create_connection(("127.0.0.1", int(port))) as conn:
            conn.sendall(line.encode() + b"\n")


def login_status() -> int:
    report(f"login {os.getpid()}")
    if os.environ.get("FAKE_CODEX_LOGGED_IN") == "1":
        print("Logged in using an API key - sk-proj-***ABCDE")
        return 0
    sys.stderr.write("Not logged in\n")
    return 1


def thread_for(resume: str | None) -> str | None:
    """The thread id this run continues or starts; None when ``resume`` names no thread."""
    home = Path(os.environ["FAKE_CODEX_HOME"]) if os.environ.get("FAKE_CODEX_HOME") else None
    if resume is None:
        thread_id = str(uuid.uuid4())
        if home is not None:
            (home / thread_id).touch()
        return thread_id
    if home is not None and not (home / resume).exists():
        return None
    return resume


def items(last_line: str) -> None:
    emit(
        {
            "type": "item.completed",
            "item": {"id": "item_0", "type": "reasoning", "text": "**Plan**"},
        }
    )
    command = {"id": "item_1", "type": "command_execution", "command": "bash -lc ls"}
    emit(
        {
            "type": "item.started",
            "item": {
                **command,
                "aggregated_output": "",
                "exit_code": None,
                "status": "in_progress",
            },
        }
    )
    emit(
        {
            "type": "item.completed",
            "item": {
                **command,
                "aggregated_output": "plan.md\n",
                "exit_code": 0,
                "status": "completed",
            },
        }
    )
    emit(
        {
            "type": "item.completed",
            "item": {"id": "item_2", "type": "agent_message", "text": f"heard: {last_line}"},
        }
    )
    emit(
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 42,
                "cached_input_tokens": 30,
                "cache_write_input_tokens": 0,
                "output_tokens": 7,
                "reasoning_output_tokens": 0,
            },
        }
    )


def mcp_server(args: list[str]) -> dict[str, str]:
    """The ``mcp_servers.parley.*`` overrides of the command line (TOML string values)."""
    server: dict[str, str] = {}
    for flag, value in itertools.pairwise(args):
        prefix = "mcp_servers.parley."
        if flag == "-c" and value.startswith(prefix):
            key, _, raw = value[len(prefix) :].partition("=")
            server[key] = json.loads(raw)
    return server


def spawn(args: list[str], last_line: str) -> None:
    server = mcp_server(args)
    if server.get("default_tools_approval_mode") != "approve":
        # What codex exec does without approval: the model's call is cancelled.
        report("spawn-failed user cancelled MCP tool call")
        items("spawn refused")
        return
    token = os.environ.get(server.get("bearer_token_env_var", ""), "")
    from hub_mcp import call_tool  # a sibling module: this script runs from tests/fakes

    ok, got = call_tool(
        server["url"],
        {"Authorization": f"Bearer {token}"},
        "spawn_child",
        {"prompt": f"Sub-task: {last_line}", "inherit_context": False},
    )
    if not ok:
        report(f"spawn-failed {got}")
        items(f"spawn failed: {got}")
        return
    report(f"spawned {got['id']} {got.get('parent_worker_id')}")
    items(f"spawned {got['id']}")


def main() -> int:
    args = sys.argv[1:]
    if args[:2] == ["login", "status"]:
        return login_status()
    assert args[:2] == ["exec", "--json"], args
    resume = args[args.index("resume") + 1] if "resume" in args else None
    thread_id = thread_for(resume)
    if thread_id is None:
        sys.stderr.write(
            "Error: thread/resume: thread/resume failed: no rollout found for thread id "
            f"{resume} (code -32600)\n\nStack backtrace:\n   0: <unknown>\n"
        )
        return 1
    prompt = sys.stdin.read()
    mode = os.environ.get("FAKE_CODEX_MODE", "reply")
    if "fake-mode=" in prompt:
        mode = prompt.split("fake-mode=", 1)[1].split()[0]
    emit({"type": "thread.started", "thread_id": thread_id})
    emit({"type": "turn.started"})
    start_tool()
    report(f"turn {os.getpid()} {thread_id} {'resumed' if resume else 'new'}")
    if mode == "fail":
        message = (
            "unexpected status 401 Unauthorized: bad key, url: http://127.0.0.1:9/v1/responses"
        )
        emit({"type": "error", "message": message})
        emit({"type": "turn.failed", "error": {"message": message}})
        return 1
    if mode == "offline":
        for _ in range(10):
            emit(
                {
                    "type": "error",
                    "message": "Reconnecting... waiting for network "
                    "(Connection failed: error sending request)",
                }
            )
    if mode == "hang-new":
        mode = "reply" if resume else "hang"
    if mode in ("offline", "hang"):
        while True:
            signal.pause()
    if mode == "reconnect":
        emit(
            {
                "type": "error",
                "message": "Reconnecting... 1/5 (stream disconnected before completion: "
                "stream closed before response.completed)",
            }
        )
    if mode == "spawn" and "Sub-task:" not in prompt:  # a child it spawned just replies
        spawn(args, prompt.strip().splitlines()[-1])
        return 0
    items(prompt.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
