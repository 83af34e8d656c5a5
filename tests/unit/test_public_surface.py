"""Pins the public surface: the REST routes of the OpenAPI document, the MCP tool names per
profile and the package's top-level exports. A change here is a change to users' integrations
and must be deliberate (and noted in CHANGELOG.md)."""

from __future__ import annotations

from pathlib import Path

from fastapi.routing import APIRoute

import parley
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.surfaces.mcp import PROFILES
from parley.surfaces.rest.app import create_app
from parley.surfaces.web import app as web_app

ROUTES = """
GET /healthz
GET /metrics
GET /readyz
GET /v1/agents
POST /v1/agents
GET /v1/agents/{agent_id}
PATCH /v1/agents/{agent_id}
POST /v1/agents/{agent_id}/archive
POST /v1/agents/{agent_id}/disable
POST /v1/agents/{agent_id}/enable
GET /v1/agents/{agent_id}/consent
PUT /v1/agents/{agent_id}/consent
GET /v1/agents/{owner}/inbox
GET /v1/agents/{owner}/inbox/stream
GET /v1/agents/{owner}/inbox/wait
GET /v1/agents/{owner}/summary
GET /v1/channels
POST /v1/channels
POST /v1/channels/private
GET /v1/channels/{channel_id}
PATCH /v1/channels/{channel_id}
DELETE /v1/channels/{channel_id}
POST /v1/channels/{channel_id}/callback
POST /v1/channels/{channel_id}/close
POST /v1/channels/{channel_id}/invitations
GET /v1/channels/{channel_id}/messages
POST /v1/channels/{channel_id}/messages
GET /v1/channels/{channel_id}/stream
GET /v1/channels/{channel_id}/tasks
POST /v1/discord/link-codes
GET /v1/discord/links
POST /v1/discord/unlink
GET /v1/events
GET /v1/events/stream
GET /v1/humans
POST /v1/humans
GET /v1/humans/{human_id}
GET /v1/im/sessions
POST /v1/im/sessions
GET /v1/im/sessions/{channel_id}
PATCH /v1/im/sessions/{channel_id}
DELETE /v1/im/sessions/{channel_id}
POST /v1/im/sessions/{channel_id}/messages
GET /v1/im/sessions/{channel_id}/messages
GET /v1/im/sessions/{channel_id}/tasks
GET /v1/invitations
POST /v1/invitations/{invitation_id}/accept
POST /v1/invitations/{invitation_id}/decline
POST /v1/mail
GET /v1/mail/{message_id}
POST /v1/mail/{message_id}/archive
POST /v1/mail/{message_id}/redeliver
POST /v1/mail/{message_id}/status
GET /v1/mail/{message_id}/thread
GET /v1/mailroom/export
POST /v1/mailroom/import
POST /v1/principals/{principal_id}/tokens
GET /v1/principals/{principal_id}/tokens
DELETE /v1/principals/{principal_id}/tokens/{token_id}
GET /v1/rooms
POST /v1/rooms
POST /v1/rooms/briefs
POST /v1/rooms/done
GET /v1/rooms/meetings/{meeting_id}
GET /v1/rooms/meetings/{meeting_id}/minutes
POST /v1/rooms/meetings/{meeting_id}/messages
GET /v1/rooms/meetings/{meeting_id}/speeches
POST /v1/rooms/meetings/{meeting_id}/stop
GET /v1/rooms/meetings/{meeting_id}/stream
GET /v1/rooms/meetings/{meeting_id}/transcript
POST /v1/rooms/stop
GET /v1/rooms/{room_id}
DELETE /v1/rooms/{room_id}
GET /v1/rooms/{room_id}/briefs
GET /v1/rooms/{room_id}/meetings
POST /v1/rooms/{room_id}/meetings
GET /v1/rooms/{room_id}/members
POST /v1/rooms/{room_id}/members
DELETE /v1/rooms/{room_id}/members/{agent_id}
GET /v1/rooms/{room_id}/pulse
POST /v1/rooms/{room_id}/pulse
GET /v1/tasks/{task_id}
DELETE /v1/tasks/{task_id}
GET /v1/tasks/{task_id}/invocations
GET /v1/turns/next
POST /v1/turns/{turn_id}/no_reply
POST /v1/turns/{turn_id}/speak
POST /v1/ui/signin-links
GET /v1/whoami
GET /v1/workers
POST /v1/workers
GET /v1/workers/{worker_id}
POST /v1/workers/{worker_id}/cancel
POST /v1/workers/{worker_id}/heartbeat
POST /v1/workers/{worker_id}/release
POST /v1/workers/{worker_id}/result
POST /v1/workers/{worker_id}/resume
POST /v1/workers/{worker_id}/spawn
GET /v1/workers/{worker_id}/stream
POST /v1/workers/{worker_id}/takeover
GET /v1/workers/{worker_id}/tree
GET /v1/sessions/{session_id}/topology
GET /v1/artifacts/{artifact_id}
GET /v1/usage
GET /v1/usage/budgets
PUT /v1/usage/budgets
DELETE /v1/usage/budgets/{scope}/{key}
GET /v1/search
"""

DISCUSS = ("list_channels", "read_channel", "post", "create_private_channel", "discuss_callback")
INVITATIONS = ("invite_to_channel", "list_invitations", "accept_invitation", "decline_invitation")
TURNS = ("wait_for_turn", "speak", "no_reply")
ROOMS = (
    "join_room",
    "leave_room",
    "convene",
    "meeting_status",
    "stop_meeting",
    "post_brief",
    "mark_done",
)
WORKERS = (
    "spawn_child",
    "report_result",
    "cancel_worker",
    "takeover",
    "topology",
    "worker_status",
    "heartbeat",
    "read_artifact",
)
MAIL = (
    "whoami",
    "send_message",
    "check_inbox",
    "read_message",
    "update_message",
    "thread",
    "wait_for_mail",
)


def test_rest_routes_are_pinned(tmp_path: Path) -> None:
    app = create_app(hub=build_hub(Settings(home=tmp_path)))
    spec = app.openapi()
    routes = {f"{method.upper()} {path}" for path, ops in spec["paths"].items() for method in ops}
    assert routes == set(ROUTES.split("\n")) - {""}
    assert "/mcp" not in spec["paths"]  # MCP is mounted, not a REST route


UI_ROUTES = """
GET /ui/
GET /ui/attention/live
GET /ui/channels
GET /ui/channels/live
GET /ui/channels/{channel_id}
GET /ui/channels/{channel_id}/live
GET /ui/channels/{channel_id}/older
GET /ui/events
GET /ui/events/live
GET /ui/mail
GET /ui/mail/live
GET /ui/mail/thread/{message_id}
GET /ui/meetings
GET /ui/meetings/live
GET /ui/meetings/{meeting_id}
GET /ui/meetings/{meeting_id}/live
GET /ui/meetings/{meeting_id}/older
GET /ui/meetings/{meeting_id}/timeline
GET /ui/new
GET /ui/overview/live
GET /ui/signin
GET /ui/search
GET /ui/signin/link
GET /ui/tasks/{task_id}/trace
GET /ui/tasks/{task_id}/turns/{invocation_id}
GET /ui/usage
GET /ui/workers
GET /ui/workers/live
GET /ui/workers/{worker_id}
GET /ui/workers/{worker_id}/live
GET /ui/live
GET /ui/{rest:path}
POST /ui/agents/create
POST /ui/channels/{channel_id}/close
POST /ui/channels/{channel_id}/post
POST /ui/groups/create
POST /ui/mail/send
POST /ui/meetings/convene
POST /ui/meetings/stop
POST /ui/meetings/{meeting_id}/post
POST /ui/meetings/{meeting_id}/stop
POST /ui/rooms/create
POST /ui/signin
POST /ui/signout
POST /ui/tasks/{task_id}/cancel
POST /ui/workers/start
POST /ui/workers/{worker_id}/cancel
POST /ui/workers/{worker_id}/release
POST /ui/workers/{worker_id}/resume
POST /ui/workers/{worker_id}/spawn
POST /ui/workers/{worker_id}/takeover
"""


def test_web_ui_routes_are_pinned() -> None:
    """The web UI's pages and actions (S5); they stay out of the OpenAPI document."""
    routes = {
        f"{method} /ui{route.path}"
        for area in web_app.AREAS
        for route in area.router.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    assert routes == set(UI_ROUTES.split("\n")) - {""}


def test_mcp_tool_profiles_are_pinned() -> None:
    expected = {
        "default": (*MAIL, *DISCUSS, *INVITATIONS, *TURNS),
        "mail": MAIL,
        "discuss": ("whoami", *DISCUSS, *INVITATIONS, *TURNS, "wait_for_mail"),
        "rooms": ("whoami", *ROOMS, *TURNS, "wait_for_mail"),
        "workers": ("whoami", *WORKERS, "wait_for_turn", "speak", "check_inbox", "wait_for_mail"),
    }
    assert dict(PROFILES) == expected


def test_package_exports() -> None:
    assert parley.__version__
    from parley.service import Hub

    assert Hub.__name__ == "Hub"


def test_runtime_secrets_are_redacted_but_not_their_neighbours() -> None:
    from parley.core.redact import is_secret_name

    assert all(is_secret_name(k) for k in ("api_key", "token", "client_secret", "password", "key"))
    assert not any(is_secret_name(k) for k in ("max_tokens", "api_key_env", "model", "base_url"))


def test_agent_connect_offers_every_mcp_profile() -> None:
    from parley.surfaces.cli import connect

    assert set(connect.PROFILES) == set(PROFILES)
