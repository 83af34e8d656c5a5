"""Claude Code and Codex command lines and output parsing, on recorded sample output."""

from __future__ import annotations

import json

import pytest

from parley.adapters.runtimes.claude_code import (
    CLAUDE_SESSION_KEY,
    claude_code_argv,
    claude_interrupt_frame,
    claude_reply,
    claude_user_frame,
    is_stale_session,
    parse_claude_stream,
)
from parley.adapters.runtimes.codex import (
    CODEX_THREAD_KEY,
    codex_argv,
    is_stale_thread,
    needs_login_check,
    parse_codex_stream,
)
from parley.core.errors import RuntimeFailure
from parley.core.runtime import Usage

SESSION = "6f0c3b7e-51d2-4a0e-9a53-2f1d8c6a9b10"
CLAUDE_MODEL = "claude-sonnet-4-5"

# What `claude -p --output-format stream-json --verbose` prints for a turn with one tool call.
CLAUDE_LINES = [
    json.dumps(
        {
            "type": "system",
            "subtype": "init",
            "cwd": "/home/dev/project",
            "session_id": SESSION,
            "tools": ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write"],
            "mcp_servers": [{"name": "parley", "status": "connected"}],
            "model": "claude-sonnet-4-5",
            "permissionMode": "default",
            "apiKeySource": "none",
            "uuid": "0b7e3a52-8f1c-4a53-9d2e-7f1a2b3c4d5e",
        }
    ),
    json.dumps(
        {
            "type": "assistant",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "Read",
                        "input": {"file_path": "/home/dev/project/plan.md"},
                    }
                ],
                "stop_reason": None,
                "usage": {"input_tokens": 4, "output_tokens": 31},
            },
            "parent_tool_use_id": None,
            "session_id": SESSION,
        }
    ),
    json.dumps(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "tool_use_id": "toolu_01",
                        "type": "tool_result",
                        "content": "# Plan\n1. migrate",
                    }
                ],
            },
            "parent_tool_use_id": None,
            "session_id": SESSION,
        }
    ),
    "[SandboxDebug] not json, ignored",
    json.dumps(
        {
            "type": "assistant",
            "message": {
                "id": "msg_02",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "The plan is sound; migrate in two steps."}],
                "stop_reason": None,
                "usage": {"input_tokens": 9, "output_tokens": 14},
            },
            "parent_tool_use_id": None,
            "session_id": SESSION,
        }
    ),
    json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "duration_ms": 5234,
            "duration_api_ms": 6012,
            "num_turns": 2,
            "result": "The plan is sound; migrate in two steps.",
            "session_id": SESSION,
            "total_cost_usd": 0.0123,
            "usage": {
                "input_tokens": 13,
                "cache_creation_input_tokens": 3456,
                "cache_read_input_tokens": 12000,
                "output_tokens": 45,
            },
            "permission_denials": [],
        }
    ),
    "",
]


def claude_result(**fields: object) -> str:
    base: dict[str, object] = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "",
        "session_id": SESSION,
    }
    return json.dumps({**base, **fields})


def test_parse_claude_stream_takes_the_final_result() -> None:
    reply = parse_claude_stream(CLAUDE_LINES)
    assert reply.text == "The plan is sound; migrate in two steps."
    assert reply.runtime_state == {CLAUDE_SESSION_KEY: SESSION}
    assert reply.usage == Usage(
        input_tokens=13,
        output_tokens=45,
        cache_read_tokens=12000,
        cache_write_tokens=3456,
        model=CLAUDE_MODEL,
        cost_usd=0.0123,
    )


def test_a_live_process_turns_cost_is_what_its_running_total_grew_by() -> None:
    # Claude Code restates the process's running total on every result of a live session.
    second = claude_reply(
        [json.loads(claude_result(total_cost_usd=0.05, usage={"input_tokens": 3}))],
        cost_before=0.0123,
    )
    assert second.usage.cost_usd == pytest.approx(0.05 - 0.0123)
    assert second.usage.input_tokens == 3
    assert claude_reply([json.loads(claude_result())]).usage.cost_usd is None


def test_parse_claude_stream_accepts_bytes() -> None:
    assert parse_claude_stream([line.encode() for line in CLAUDE_LINES]).text.startswith("The plan")


@pytest.mark.parametrize(
    ("result", "reason", "stop_reason", "message"),
    [
        (
            # How Claude Code 2.1 reports an API error: subtype "success" with is_error.
            claude_result(
                is_error=True,
                api_error_status=400,
                result="API Error: 400 scripted bad request",
                stop_reason="stop_sequence",
            ),
            "error",
            "success",
            "Claude Code reported an error: API Error: 400 scripted bad request",
        ),
        (
            claude_result(subtype="error_during_execution", is_error=True),
            "error",
            "error_during_execution",
            "Claude Code reported an error ('error_during_execution')",
        ),
        (
            claude_result(subtype="error_max_turns", is_error=True),
            "stop_reason",
            "error_max_turns",
            "Claude Code stopped before finishing the turn ('error_max_turns')",
        ),
    ],
)
def test_parse_claude_stream_error_results_are_failures(
    result: str, reason: str, stop_reason: str, message: str
) -> None:
    with pytest.raises(RuntimeFailure) as caught:
        parse_claude_stream([*CLAUDE_LINES[:3], result])
    assert caught.value.reason == reason
    assert caught.value.stop_reason == stop_reason
    assert caught.value.details["session_id"] == SESSION
    assert caught.value.message.startswith(message)
    assert "ended its turn with 'success'" not in caught.value.message
    assert not is_stale_session(caught.value)


def test_an_unknown_resume_id_is_recognised() -> None:
    # What `claude ... --resume=<unknown id>` 2.1.197 prints before exiting with status 1.
    missing = f"No conversation found with session ID: {SESSION}"
    event = json.loads(
        claude_result(
            subtype="error_during_execution", is_error=True, num_turns=0, errors=[missing]
        )
    )
    del event["result"]  # such results carry ``errors`` instead
    with pytest.raises(RuntimeFailure) as caught:
        parse_claude_stream([json.dumps(event)])
    assert caught.value.details["stale_session"] is True
    assert is_stale_session(caught.value)
    assert missing in caught.value.message
    # Seen only on stderr, it counts too.
    assert is_stale_session(RuntimeFailure("exit 1", stderr_tail=missing + "\n"))


def test_parse_claude_stream_without_a_result_is_a_failure() -> None:
    with pytest.raises(RuntimeFailure) as caught:
        parse_claude_stream(CLAUDE_LINES[:3])
    assert "without a result" in caught.value.message


def test_claude_frames() -> None:
    user = json.loads(claude_user_frame("hello"))
    assert user == {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    }
    interrupt = json.loads(claude_interrupt_frame("req-1"))
    assert interrupt == {
        "type": "control_request",
        "request_id": "req-1",
        "request": {"subtype": "interrupt"},
    }


def test_claude_code_argv() -> None:
    assert claude_code_argv() == [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--verbose",
        "--replay-user-messages",
    ]
    argv = claude_code_argv(model="opus", permission_mode="acceptEdits", resume="--evil")
    assert argv[-5:] == ["--model", "opus", "--permission-mode", "acceptEdits", "--resume=--evil"]


def test_codex_argv() -> None:
    assert codex_argv() == ["codex", "exec", "--json", "-"]
    assert codex_argv(model="gpt-5-codex", skip_git_repo_check=True, resume="th_1") == [
        "codex",
        "exec",
        "--json",
        "--model",
        "gpt-5-codex",
        "--skip-git-repo-check",
        "resume",
        "th_1",
        "-",
    ]


# What `codex exec --json -` prints for a turn that ran one command.
CODEX_EVENTS: list[dict[str, object]] = [
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "**Plan**"}},
    {
        "type": "item.started",
        "item": {
            "id": "item_1",
            "type": "command_execution",
            "command": "bash -lc ls",
            "aggregated_output": "",
            "status": "in_progress",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "item_1",
            "type": "command_execution",
            "command": "bash -lc ls",
            "aggregated_output": "plan.md\n",
            "exit_code": 0,
            "status": "completed",
        },
    },
    {
        "type": "item.completed",
        "item": {"id": "item_2", "type": "agent_message", "text": "Two steps are enough."},
    },
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122},
    },
]
CODEX_LINES = [json.dumps(event, separators=(",", ":")) for event in CODEX_EVENTS]


def test_parse_codex_stream_takes_the_last_agent_message() -> None:
    reply = parse_codex_stream(CODEX_LINES)
    assert reply.text == "Two steps are enough."
    assert reply.usage == Usage(input_tokens=24763, output_tokens=122, cache_read_tokens=24448)
    assert reply.runtime_state == {CODEX_THREAD_KEY: "0199a213-81c0-7800-8aa1-bbab2a035a53"}


def test_parse_codex_stream_failures() -> None:
    failed = '{"type":"turn.failed","error":{"message":"stream disconnected"}}'
    with pytest.raises(RuntimeFailure) as caught:
        parse_codex_stream([*CODEX_LINES[:3], failed])
    assert "Codex failed the turn: stream disconnected" in caught.value.message
    with pytest.raises(RuntimeFailure) as caught:
        parse_codex_stream(CODEX_LINES[:3])
    assert "without turn.completed" in caught.value.message


# What codex-cli 0.171.0 prints when its stream drops once and the retry completes the turn.
RECONNECTED = [
    '{"type":"thread.started","thread_id":"01a22f80-64b4-7140-a2eb-300af40689e7"}',
    '{"type":"turn.started"}',
    '{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion: '
    'stream closed before response.completed)"}',
    '{"type":"item.completed","item":{"id":"item_0","type":"agent_message",'
    '"text":"Fake codex reply."}}',
    '{"type":"turn.completed","usage":{"input_tokens":42,"cached_input_tokens":0,'
    '"cache_write_input_tokens":0,"output_tokens":7,"reasoning_output_tokens":0}}',
]


def test_codex_errors_before_turn_completed_are_retries_not_failures() -> None:
    reply = parse_codex_stream(RECONNECTED)
    assert reply.text == "Fake codex reply."
    assert reply.usage == Usage(input_tokens=42, output_tokens=7)
    assert reply.timings == {"reconnects": 1.0}


def test_codex_errors_without_turn_completed_are_a_failure() -> None:
    with pytest.raises(RuntimeFailure) as caught:
        parse_codex_stream(RECONNECTED[:3])
    assert "its last error: Reconnecting... 1/5" in caught.value.message


def test_codex_stale_thread_and_login_rules() -> None:
    # codex-cli 0.171.0 on `codex exec resume <unknown id> -`: no events, exit 1, this stderr.
    assert is_stale_thread(
        "Error: thread/resume: thread/resume failed: no rollout found for thread id "
        "0199a213-81c0-7800-8aa1-bbab2a035a53 (code -32600)"
    )
    assert not is_stale_thread("Error: unexpected status 401 Unauthorized")
    assert needs_login_check({}, [])
    assert not needs_login_check({"CODEX_API_KEY": "sk-1"}, [])
    assert not needs_login_check({"OPENAI_API_KEY": "sk-1"}, [])
    assert not needs_login_check({}, ["-c", "model_provider=ollama"])
    assert needs_login_check({"CODEX_API_KEY": ""}, ["-c", "model_providers.x.name=x"])
