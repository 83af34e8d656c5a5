"""A local fake Discord for the bridge's tests: the REST endpoints the bridge uses and a gateway
websocket, on aiohttp (a dependency of discord.py already). The REAL discord.py client talks to
it: point ``discord.http.Route.BASE`` at :attr:`FakeDiscord.api_base` and
``DiscordWebSocket.DEFAULT_GATEWAY`` at :attr:`FakeDiscord.gateway_url`.

It records every request, answers 429 with ``retry_after`` when told to, and like Discord it
answers a message whose nonce it has seen (``enforce_nonce``) with the message it created then.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.payload import BytesPayload

APP_ID = 900000000000000001
BOT_ID = 900000000000000002
GUILD_ID = 900000000000000010
FORUM_ID = 900000000000000020
BOT_ROLE_ID = 900000000000000030
TIMESTAMP = "2026-12-01T12:00:00.000000+00:00"


@dataclass
class Request:
    method: str
    path: str
    body: Any
    status: int = 200


@dataclass
class Thread:
    id: int
    name: str
    archived: bool = False
    messages: dict[int, str] = field(default_factory=dict)


def user(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name,
        "discriminator": "0",
        "global_name": name,
        "avatar": None,
        "bot": bot,
    }


def json_response(
    data: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    # discord.py reads a body as JSON only under exactly this content type, as Discord sends.
    # (aiohttp would add "; charset=utf-8" to a content type it sets itself.)
    body = BytesPayload(json.dumps(data).encode(), content_type="application/json")
    response = web.Response(body=body, status=status)
    response.headers.update(headers or {})
    return response


class FakeDiscord:
    """Start with ``async with FakeDiscord() as fake``; ``fake.requests`` lists what came in."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.threads: dict[int, Thread] = {}
        self.by_nonce: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(910000000000000000)
        self.rate_limits: list[tuple[str, re.Pattern[str], float]] = []
        self.holds: list[tuple[str, re.Pattern[str], asyncio.Event, asyncio.Event]] = []
        self.identified = asyncio.Event()
        self.changed = asyncio.Condition()
        self._sockets: list[web.WebSocketResponse] = []
        self._seq = itertools.count(2)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.token = "test-token"
        # The bot's role: every permission the bridge needs (tests take some away).
        self.bot_permissions = (1 << 10) | (1 << 11) | (1 << 38) | (1 << 35) | (1 << 34) | (1 << 16)

    # -- life --------------------------------------------------------------------------------------
    async def __aenter__(self) -> FakeDiscord:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for ws in list(self._sockets):
            await ws.close()
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def rate_limit(self, method: str, path_regex: str, *, retry_after: float = 0.05) -> None:
        """Answer the next matching request with 429 and ``retry_after`` (once)."""
        self.rate_limits.append((method, re.compile(path_regex), retry_after))

    def hold(self, method: str, path_regex: str) -> tuple[asyncio.Event, asyncio.Event]:
        """Keep the next matching request waiting: returns (arrived, release). Like a slow or
        rate-limited Discord, without a clock."""
        arrived, release = asyncio.Event(), asyncio.Event()
        self.holds.append((method, re.compile(path_regex), arrived, release))
        return arrived, release

    async def wait_for(self, predicate: Any, timeout_s: float = 20.0) -> None:
        """Wait until ``predicate(self)`` holds; the timeout only guards against a hang."""
        async with asyncio.timeout(timeout_s), self.changed:
            await self.changed.wait_for(lambda: predicate(self))

    # -- what tests look at ------------------------------------------------------------------------
    def made(self, method: str, path_regex: str) -> list[Request]:
        pattern = re.compile(path_regex)
        return [r for r in self.requests if r.method == method and pattern.fullmatch(r.path)]

    def posts(self) -> list[Thread]:
        return list(self.threads.values())

    def post_named(self, fragment: str) -> Thread:
        found = [t for t in self.threads.values() if fragment in t.name]
        assert len(found) == 1, [t.name for t in self.threads.values()]
        return found[0]

    # -- gateway -----------------------------------------------------------------------------------
    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        for ws in list(self._sockets):
            await ws.send_str(json.dumps({"op": 0, "t": event, "s": next(self._seq), "d": data}))

    async def user_message(
        self, thread_id: int, content: str, *, user_id: int, name: str = "maple"
    ) -> int:
        """A person's message in a thread, as MESSAGE_CREATE; returns its id."""
        message_id = next(self.ids)
        await self.dispatch(
            "MESSAGE_CREATE",
            self._message_json(message_id, thread_id, content, author=user(user_id, name)),
        )
        return message_id

    async def redeliver(self, thread_id: int, message_id: int, content: str, user_id: int) -> None:
        await self.dispatch(
            "MESSAGE_CREATE",
            self._message_json(message_id, thread_id, content, author=user(user_id, "maple")),
        )

    async def slash(
        self, name: str, options: dict[str, str], *, thread_id: int, user_id: int
    ) -> str:
        """Run a slash command as INTERACTION_CREATE; returns the interaction token, by which
        :meth:`reply_to` finds the answer."""
        interaction_id = next(self.ids)
        token = f"tok-{interaction_id}"
        await self.dispatch(
            "INTERACTION_CREATE",
            {
                "id": str(interaction_id),
                "application_id": str(APP_ID),
                "type": 2,
                "token": token,
                "version": 1,
                "guild_id": str(GUILD_ID),
                "channel_id": str(thread_id),
                "channel": self._place_json(thread_id),
                "member": {
                    "user": user(user_id, "maple"),
                    "roles": [],
                    "joined_at": TIMESTAMP,
                    "deaf": False,
                    "mute": False,
                    "permissions": "2147483647",
                    "flags": 0,
                },
                "app_permissions": "2147483647",
                "attachment_size_limit": 8388608,
                "locale": "en-US",
                "entitlements": [],
                "authorizing_integration_owners": {"0": str(GUILD_ID)},
                "context": 0,
                "data": {
                    "id": str(next(self.ids)),
                    "name": name,
                    "type": 1,
                    "guild_id": str(GUILD_ID),
                    "options": [{"name": k, "type": 3, "value": v} for k, v in options.items()],
                },
            },
        )
        return token

    def reply_to(self, token: str) -> str | None:
        for r in self.requests:
            if r.method == "POST" and r.path == f"/webhooks/{APP_ID}/{token}":
                return str(r.body.get("content"))
        return None

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 45000}}))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                if data["op"] == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif data["op"] == 2:
                    await ws.send_str(
                        json.dumps({"op": 0, "t": "READY", "s": 1, "d": self._ready()})
                    )
                    self.identified.set()
                    await self._changed()
        finally:
            self._sockets.remove(ws)
        return ws

    def _ready(self) -> dict[str, Any]:
        return {
            "v": 10,
            "user": user(BOT_ID, "parley-bot", bot=True),
            "guilds": [],
            "session_id": "fake-session",
            "resume_gateway_url": self.gateway_url,
            "shard": [0, 1],
            "application": {"id": str(APP_ID), "flags": 1 << 19},
        }

    # -- REST --------------------------------------------------------------------------------------
    async def _changed(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _rest(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        body: Any = await request.json() if request.can_read_body else None
        for i, (method, pattern, arrived, release) in enumerate(self.holds):
            if method == request.method and pattern.fullmatch(path):
                del self.holds[i]
                arrived.set()
                await release.wait()
                break
        for i, (method, pattern, retry_after) in enumerate(self.rate_limits):
            if method == request.method and pattern.fullmatch(path):
                del self.rate_limits[i]
                self.requests.append(Request(request.method, path, body, 429))
                await self._changed()
                return json_response(
                    {
                        "message": "You are being rate limited.",
                        "retry_after": retry_after,
                        "global": False,
                    },
                    status=429,
                    # As Discord answers through its proxy: discord.py treats a 429 without
                    # ``Via`` as a Cloudflare ban and does not retry it.
                    headers={
                        "Retry-After": str(retry_after),
                        "X-RateLimit-Scope": "user",
                        "X-RateLimit-Limit": "2",
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Reset-After": str(retry_after),
                        "X-RateLimit-Bucket": "fake-bucket",
                        "Via": "1.1 google",
                    },
                )
        # Interaction answers authenticate by the interaction's own token, in the path.
        by_token = path.startswith(("/interactions/", "/webhooks/"))
        if not by_token and request.headers.get("Authorization") != f"Bot {self.token}":
            self.requests.append(Request(request.method, path, body, 401))
            return json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        self.requests.append(Request(request.method, path, body))
        try:
            return json_response(self._answer(request.method, path, body))
        except KeyError:
            self.requests[-1].status = 404
            return json_response({"message": "Unknown Channel", "code": 10003}, status=404)
        finally:
            await self._changed()

    def _answer(self, method: str, path: str, body: Any) -> Any:  # noqa: C901 - a route table
        parts = path.strip("/").split("/")
        if path == "/users/@me":
            return user(BOT_ID, "parley-bot", bot=True)
        if path == "/oauth2/applications/@me":
            return {
                "id": str(APP_ID),
                "name": "parley",
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": user(1, "owner"),
                "verify_key": "0" * 64,
                "flags": 1 << 19,
            }
        if parts[0] == "guilds" and len(parts) == 2:
            return self._guild_json()
        if parts[0] == "guilds" and parts[2] == "members":
            return {
                "user": user(BOT_ID, "parley-bot", bot=True),
                "roles": [str(BOT_ROLE_ID)],
                "joined_at": TIMESTAMP,
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        if parts[0] == "applications" and parts[-1] == "commands":
            if method == "GET":
                return []
            return [
                {
                    **c,
                    "id": str(next(self.ids)),
                    "application_id": str(APP_ID),
                    "guild_id": str(GUILD_ID),
                    "version": "1",
                    "default_member_permissions": None,
                    "dm_permission": True,
                    "nsfw": False,
                }
                for c in body
            ]
        if parts[0] == "channels" and len(parts) == 2:
            channel_id = int(parts[1])
            if channel_id == FORUM_ID:
                return self._forum_json()
            thread = self.threads[channel_id]
            if method == "PATCH":
                thread.name = body.get("name", thread.name)
                thread.archived = body.get("archived", thread.archived)
            return self._thread_json(thread)
        if parts[0] == "channels" and parts[2] == "threads":
            thread = Thread(next(self.ids), body["name"])
            self.threads[thread.id] = thread
            message_id = next(self.ids)
            content = body["message"].get("content", "")
            thread.messages[message_id] = content
            return {
                **self._thread_json(thread),
                "message": self._message_json(message_id, thread.id, content),
            }
        if parts[0] == "channels" and parts[2] == "messages":
            thread = self.threads[int(parts[1])]
            if method == "PATCH":
                message_id = int(parts[3])
                thread.messages[message_id] = body["content"]
                return self._message_json(message_id, thread.id, body["content"])
            nonce = body.get("nonce")
            if nonce is not None and body.get("enforce_nonce") and nonce in self.by_nonce:
                return self.by_nonce[nonce]
            message_id = next(self.ids)
            thread.messages[message_id] = body["content"]
            answer = self._message_json(message_id, thread.id, body["content"])
            if nonce is not None:
                self.by_nonce[nonce] = answer
            return answer
        if parts[0] == "interactions":
            return {
                "interaction": {
                    "id": parts[1],
                    "type": 2,
                    "response_message_loading": True,
                    "response_message_ephemeral": True,
                }
            }
        if parts[0] == "webhooks":
            return self._message_json(next(self.ids), 0, body.get("content", ""))
        raise KeyError(path)

    def _guild_json(self) -> dict[str, Any]:
        role = {
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "color": 0,
            "position": 0,
            "flags": 0,
            "icon": None,
            "unicode_emoji": None,
        }
        return {
            "id": str(GUILD_ID),
            "name": "parley test",
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "owner_id": "1",
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [
                {**role, "id": str(GUILD_ID), "name": "@everyone", "permissions": "0"},
                {
                    **role,
                    "id": str(BOT_ROLE_ID),
                    "name": "parley",
                    "permissions": str(self.bot_permissions),
                    "position": 1,
                },
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "application_id": None,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "description": None,
            "banner": None,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
        }

    def _place_json(self, channel_id: int) -> dict[str, Any]:
        """A forum post as a thread, anything else as a plain text channel."""
        thread = self.threads.get(channel_id)
        if thread is not None:
            return self._thread_json(thread)
        return {
            "id": str(channel_id),
            "type": 0,
            "guild_id": str(GUILD_ID),
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "flags": 0,
            "rate_limit_per_user": 0,
        }

    def _forum_json(self) -> dict[str, Any]:
        return {
            "id": str(FORUM_ID),
            "type": 15,
            "guild_id": str(GUILD_ID),
            "name": "workers",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "flags": 0,
            "available_tags": [],
            "default_reaction_emoji": None,
            "default_sort_order": None,
            "default_forum_layout": 0,
            "rate_limit_per_user": 0,
            "default_thread_rate_limit_per_user": 0,
        }

    def _thread_json(self, thread: Thread) -> dict[str, Any]:
        return {
            "id": str(thread.id),
            "type": 11,
            "guild_id": str(GUILD_ID),
            "parent_id": str(FORUM_ID),
            "owner_id": str(BOT_ID),
            "name": thread.name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": len(thread.messages),
            "member_count": 1,
            "flags": 0,
            "applied_tags": [],
            "thread_metadata": {
                "archived": thread.archived,
                "auto_archive_duration": 10080,
                "archive_timestamp": TIMESTAMP,
                "locked": False,
            },
        }

    def _message_json(
        self, message_id: int, channel_id: int, content: str, *, author: Any = None
    ) -> dict[str, Any]:
        return {
            "id": str(message_id),
            "channel_id": str(channel_id),
            "guild_id": str(GUILD_ID),
            "author": author or user(BOT_ID, "parley-bot", bot=True),
            "content": content,
            "timestamp": TIMESTAMP,
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
