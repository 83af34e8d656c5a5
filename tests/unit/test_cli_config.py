"""The CLI's configuration resolution, SSE parsing, error mapping and command surface — no hub,
no database."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import platformdirs
import pytest
from typer.testing import CliRunner

from parley.config import resolve_home
from parley.surfaces.cli import mailroom
from parley.surfaces.cli.app import app
from parley.surfaces.cli.client import (
    DEFAULT_URL,
    ApiError,
    ClientConfig,
    CliFailure,
    HubClient,
    HubUnreachable,
    parse_sse,
    resolve_config,
    resolve_token,
    resolve_url,
)

ENV_VARS = ("PARLEY_HOME", "PARLEY_URL", "PARLEY_TOKEN")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def test_resolve_home_never_uses_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = set()
    for name in ("one", "two"):
        cwd = tmp_path / name
        cwd.mkdir()
        (cwd / "parley.db").write_text("")  # a data root look-alike in the cwd is ignored
        monkeypatch.chdir(cwd)
        home = resolve_home()
        assert cwd != home and cwd not in home.parents
        seen.add(home)
    assert seen == {Path(platformdirs.user_data_dir("parley", appauthor=False)).resolve()}

    explicit = tmp_path / "explicit"
    monkeypatch.setenv("PARLEY_HOME", str(tmp_path / "from-env"))
    assert resolve_home(explicit) == explicit
    assert resolve_home() == tmp_path / "from-env"
    assert resolve_home().is_absolute()


def test_url_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_url(None, tmp_path) == (DEFAULT_URL, "default")
    (tmp_path / "hub.json").write_text(json.dumps({"url": "http://127.0.0.1:1111/", "pid": 1}))
    assert resolve_url(None, tmp_path) == ("http://127.0.0.1:1111", str(tmp_path / "hub.json"))
    monkeypatch.setenv("PARLEY_URL", "http://env:2222")
    assert resolve_url(None, tmp_path) == ("http://env:2222", "PARLEY_URL")
    assert resolve_url("http://flag:3333/", tmp_path) == ("http://flag:3333", "--url")


def test_url_ignores_a_broken_hub_json(tmp_path: Path) -> None:
    (tmp_path / "hub.json").write_text("{not json")
    assert resolve_url(None, tmp_path) == (DEFAULT_URL, "default")


def test_token_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_token(None, tmp_path) == (None, None)
    (tmp_path / "operator.token").write_text("pt_file\n")
    assert resolve_token(None, tmp_path) == ("pt_file", str(tmp_path / "operator.token"))
    monkeypatch.setenv("PARLEY_TOKEN", "pt_env")
    assert resolve_token(None, tmp_path) == ("pt_env", "PARLEY_TOKEN")
    assert resolve_token("pt_flag", tmp_path) == ("pt_flag", "--token")


def test_unreadable_token_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "operator.token").mkdir()  # unreadable as a file, even for root
    assert resolve_token(None, tmp_path) == (None, None)
    (tmp_path / "operator.token").rmdir()
    (tmp_path / "operator.token").write_text("  \n")
    assert resolve_token(None, tmp_path) == (None, None)


def test_config_files_in_the_cwd_are_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "hub.json").write_text(json.dumps({"url": "http://decoy:1"}))
    (cwd / "operator.token").write_text("pt_decoy\n")
    monkeypatch.chdir(cwd)
    home = tmp_path / "home"
    home.mkdir()
    config = resolve_config(home=str(home), url=None, token=None)
    assert (config.home, config.url, config.token) == (home, DEFAULT_URL, None)


def test_parse_sse() -> None:
    raw = [
        ": ping - 2026-01-01",
        "id: 7",
        "event: mail",
        'data: {"a": 1}',
        "",
        "",
        "data: line one",
        "data: line two",
        "",
        "event: partial",
    ]
    events = list(parse_sse(iter(raw)))
    assert [(e.event, e.id, e.data) for e in events] == [
        ("mail", "7", '{"a": 1}'),
        ("message", None, "line one\nline two"),
    ]
    assert events[0].json() == {"a": 1}


def _client(handler: httpx.MockTransport, token: str | None = "pt_x") -> HubClient:
    config = ClientConfig(Path("/nowhere"), "http://hub.test", "--url", token, "--token")
    return HubClient(config, transport=handler)


def test_api_errors_keep_the_code_and_message() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer pt_x"
        if request.url.path == "/v1/mail/x":
            body = {"code": "message_not_found", "message": "no message 'x'", "details": {"a": 1}}
            return httpx.Response(404, json=body)
        return httpx.Response(502, text="Bad Gateway from a proxy")

    hub = _client(httpx.MockTransport(handler))
    with pytest.raises(ApiError) as found:
        hub.get("/v1/mail/x")
    assert (found.value.status, found.value.code, found.value.message) == (
        404,
        "message_not_found",
        "no message 'x'",
    )
    assert found.value.details == {"a": 1}
    with pytest.raises(ApiError) as proxy:
        hub.get("/elsewhere")
    assert (proxy.value.code, proxy.value.message) == ("http_502", "Bad Gateway from a proxy")


def test_missing_token_is_explained() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert "authorization" not in request.headers
        body = {"code": "unauthenticated", "message": "no bearer token", "details": {}}
        return httpx.Response(401, json=body)

    with pytest.raises(ApiError) as found:
        _client(httpx.MockTransport(handler), token=None).get("/v1/whoami")
    assert "pass --token, set PARLEY_TOKEN" in found.value.message


def test_unreachable_hub_says_how_to_start_one() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(HubUnreachable) as found:
        _client(httpx.MockTransport(handler)).get("/v1/agents")
    assert found.value.code == "hub_unreachable"
    assert "http://hub.test (from --url)" in found.value.message
    assert "parley serve" in found.value.message


def test_mailroom_paths_from_the_hub_stay_inside(tmp_path: Path) -> None:
    for bad in ("../x.md", "/etc/passwd", "inbox/../../x.md", "", "a\\..\\b.md"):
        with pytest.raises(CliFailure, match="not a plain relative path"):
            mailroom.write_files(tmp_path, {"inbox/a/ok.md": "x", bad: "y"})
    assert list(tmp_path.iterdir()) == [], "nothing is written when one path is unsafe"


def test_mailroom_files_round_trip_byte_for_byte(tmp_path: Path) -> None:
    files = {"inbox/alice/a.md": "---\nid: 1\n---\r\nbody ✓\n", "archive/W1/b.md": "no newline"}
    mailroom.write_files(tmp_path, files)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    (tmp_path / "inbox" / ".swp").write_text("editor")
    assert mailroom.read_files(tmp_path) == files
    (tmp_path / "inbox" / "bin.md").write_bytes(b"\xff\xfe")
    with pytest.raises(CliFailure, match="not UTF-8"):
        mailroom.read_files(tmp_path)


def test_cli_reports_failures_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["--home", str(tmp_path), "--url", "http://127.0.0.1:9", "whoami"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error [hub_unreachable]: no parley hub answers at ")
    usage = runner.invoke(app, ["mail", "send"])
    assert usage.exit_code == 2


def test_wrappers_report_a_missing_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    for command, module in (["demo"], "parley.demo"), (["mcp"], "parley.surfaces.mcp.stdio"):
        monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
        result = runner.invoke(app, ["--home", str(tmp_path), *command])
        assert result.exit_code == 1, result.output
        assert "not available yet" in result.stderr


def test_mcp_wrapper_relays_only_to_a_configured_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from parley.surfaces.mcp import stdio

    calls: list[dict[str, Any]] = []

    def fake_run_stdio(**kwargs: Any) -> int:
        calls.append(kwargs)
        return 0

    monkeypatch.setattr(stdio, "run_stdio", fake_run_stdio)
    (tmp_path / "operator.token").write_text("pt_operator\n")
    runner = CliRunner()
    assert runner.invoke(app, ["--home", str(tmp_path), "mcp"]).exit_code == 0
    embedded = calls.pop()
    assert (embedded["url"], embedded["token"], embedded["profile"]) == (None, None, "default")
    assert embedded["settings"].data_root() == tmp_path.resolve()

    (tmp_path / "hub.json").write_text(json.dumps({"url": "http://127.0.0.1:4321"}))
    args = ["--home", str(tmp_path), "--token", "pt_agent", "mcp", "--profile", "mail"]
    assert runner.invoke(app, args).exit_code == 0
    assert calls.pop() == {"url": "http://127.0.0.1:4321", "token": "pt_agent", "profile": "mail"}

    monkeypatch.setattr(stdio, "run_stdio", lambda **kwargs: 2)
    assert runner.invoke(app, ["--home", str(tmp_path), "mcp"]).exit_code == 2


def test_command_surface_is_pinned() -> None:
    import typer.main

    root = typer.main.get_command(app)
    assert hasattr(root, "commands")
    tree = {
        name: sorted(getattr(cmd, "commands", {}) or [])
        for name, cmd in sorted(root.commands.items())
    }
    assert tree == {
        "agent": [
            "add",
            "archive",
            "connect",
            "consent",
            "disable",
            "enable",
            "list",
            "show",
            "update",
        ],
        "channel": ["create", "invite", "list", "messages", "post", "show", "tasks", "watch"],
        "demo": [],
        "discord": ["check", "link", "links", "unlink"],
        "discuss": ["callback", "close", "start", "status", "watch"],
        "events": [],
        "group": ["create", "delete", "list", "post", "set", "watch"],
        "human": ["add", "list", "show"],
        "invitation": ["accept", "decline", "list"],
        "mail": [
            "ack",
            "archive",
            "close",
            "inbox",
            "redeliver",
            "send",
            "show",
            "start",
            "summary",
            "thread",
            "watch",
        ],
        "mailroom": ["export", "import"],
        "mcp": [],
        "room": [
            "board",
            "brief",
            "convene",
            "create",
            "delete",
            "done",
            "join",
            "leave",
            "list",
            "meeting",
            "meetings",
            "members",
            "minutes",
            "post",
            "pulse",
            "show",
            "stop",
            "transcript",
            "watch",
        ],
        "search": [],
        "serve": [],
        "status": [],
        "task": ["cancel", "show"],
        "token": ["issue", "list", "revoke"],
        "usage": ["budget"],
        "ui": [],
        "whoami": [],
        "worker": [
            "cancel",
            "list",
            "release",
            "resume",
            "show",
            "spawn",
            "start",
            "takeover",
            "topology",
            "tree",
            "watch",
        ],
    }
