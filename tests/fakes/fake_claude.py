"""A fake Claude Code for ``claude -p --input-format stream-json --output-format stream-json``.

It reads user frames from stdin and, for each, prints NDJSON events the way Claude Code does
(``system``/``init``, ``assistant``, ``result``), then waits for the next frame; it exits on EOF.
``--resume=<id>`` continues that session id. Modes (first argument):

- ``reply``: the result text is ``heard: <last line of the user text>``.
- ``error``: the result is an error (``is_error``, subtype ``error_during_execution``).
- ``max-turns``: the result has subtype ``error_max_turns``.
- ``no-result``: print init and exit 0 without a result.
- ``hang``: print init, tell the test on 127.0.0.1:$FAKE_READY_PORT, and wait for an
  ``interrupt`` control request; report it to the test, then end the turn as Claude Code does.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def result(session_id: str, text: str, *, subtype: str = "success", error: bool = False) -> None:
    emit(
        {
            "type": "result",
            "subtype": subtype,
            "is_error": error,
            "duration_ms": 12,
            "num_turns": 1,
            "result": text,
            "session_id": session_id,
            "total_cost_usd": 0.0,
            "usage": {"input_tokens": 11, "output_tokens": 5},
        }
    )


def main() -> int:
    mode = sys.argv[1]
    session_id = str(uuid.uuid4())
    for arg in sys.argv[2:]:
        if arg.startswith("--resume="):
            session_id = arg.split("=", 1)[1]
    reporter: socket.socket | None = None
    for raw in sys.stdin:
        frame = json.loads(raw)
        if frame.get("type") == "control_request":
            if frame["request"]["subtype"] == "interrupt" and reporter is not None:
                reporter.sendall(f"interrupted {frame['request_id']}\n".encode())
                result(session_id, "", subtype="error_during_execution", error=True)
            continue
        content = frame["message"]["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        emit({"type": "system", "subtype": "init", "session_id": session_id, "model": "fake"})
        if mode == "no-result":
            return 0
        if mode == "hang":
            reporter = socket.create_connection(("127.0.0.1", int(os.environ["FAKE_READY_PORT"])))
            reporter.sendall(f"{os.getpid()}\n".encode())
            continue
        last_line = text.strip().splitlines()[-1]
        emit(
            {
                "type": "assistant",
                "session_id": session_id,
                "message": {
                    "role": "assistant",
                    "model": "fake",
                    "content": [{"type": "text", "text": f"heard: {last_line}"}],
                },
            }
        )
        if mode == "reply":
            result(session_id, f"heard: {last_line}")
        elif mode == "error":
            result(session_id, "API Error: overloaded", subtype="success", error=True)
        elif mode == "max-turns":
            result(session_id, "", subtype="error_max_turns", error=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
