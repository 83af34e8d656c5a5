"""The Discord side of the chat bridge (SPEC S6): :class:`~parley.core.bridge.ChatBridge` on
discord.py 2.x.

Everything that talks to Discord goes through discord.py's HTTP client and gateway, so its
rate limiter (per-route buckets, ``429`` with ``retry_after``, the global limit) is the one that
applies: the bridge never sleeps on its own. Imported only when the bridge starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp
import discord
from discord import app_commands

from parley.core.bridge import CommandCall, Inbound, InboundMessage, PostRef, cut
from parley.core.errors import ConfigError

log = logging.getLogger("parley.bridge.discord")

REPLY_MAX = 2000
# What the bot needs (docs/discord.md): read messages, their content (a privileged intent the
# bot's settings must enable) and guild events; no member or presence data.
INTENTS = discord.Intents(guilds=True, guild_messages=True, message_content=True)


class DiscordBridge:
    """A bot in one guild: worker posts in one forum channel, slash commands in the guild."""

    def __init__(self, token: str, *, guild_id: int, forum_channel_id: int) -> None:
        self._token = token
        self.guild_id = guild_id
        self.forum_channel_id = forum_channel_id
        self.client = discord.Client(intents=INTENTS)
        self.tree = app_commands.CommandTree(self.client)
        self._inbound: Inbound | None = None
        self._forum: discord.ForumChannel | None = None
        self._gateway: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self._add_commands()
        self.client.event(self.on_message)
        self.client.event(self.on_connect)

    # -- life --------------------------------------------------------------------------------------
    async def start(self, inbound: Inbound) -> None:
        """Log in (``GET /users/@me``), register the slash commands in the guild, and keep the
        gateway connection in a task of its own (discord.py reconnects and resumes it)."""
        self._inbound = inbound
        try:
            await self.client.login(self._token)
            await self.tree.sync(guild=discord.Object(self.guild_id))
        except discord.LoginFailure as exc:
            await self.client.close()
            raise ConfigError(
                "Discord refused the bot token; set PARLEY_DISCORD_TOKEN to the token of the "
                "bot (Developer Portal → your application → Bot → Reset Token)",
                code="discord_bad_token",
            ) from exc
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            await self.client.close()
            raise ConfigError(
                f"the Discord bridge could not start: {exc}; run `parley discord check`",
                code="discord_unavailable",
            ) from exc
        except BaseException:
            await self.client.close()
            raise
        self._gateway = asyncio.create_task(self._connect(), name="parley-discord-gateway")

    async def _connect(self) -> None:
        try:
            await self.client.connect(reconnect=True)
        except Exception:
            log.exception("the Discord gateway connection ended")

    async def on_connect(self) -> None:
        self.connected.set()

    async def close(self) -> None:
        await self.client.close()
        if self._gateway is not None:
            self._gateway.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._gateway

    # -- outgoing ----------------------------------------------------------------------------------
    async def _forum_channel(self) -> discord.ForumChannel:
        if self._forum is None:
            channel = await self.client.fetch_channel(self.forum_channel_id)
            if not isinstance(channel, discord.ForumChannel):
                raise ConfigError(
                    f"Discord channel {self.forum_channel_id} is not a forum channel; set "
                    "PARLEY_DISCORD_FORUM_CHANNEL_ID to a forum's id",
                    code="discord_not_a_forum",
                )
            self._forum = channel
        return self._forum

    async def create_post(self, title: str, content: str) -> PostRef:
        forum = await self._forum_channel()
        made = await forum.create_thread(name=title, content=content)
        return PostRef(place_id=str(made.thread.id), message_id=str(made.message.id))

    async def edit_post(self, place_id: str, *, title: str, archived: bool) -> None:
        await self.client.http.edit_channel(int(place_id), name=title, archived=archived)

    async def send(self, place_id: str, content: str, *, nonce: str) -> str:
        # discord.py sends the nonce with enforce_nonce: Discord answers a repeat with the
        # message it already created instead of posting it again.
        sent = await self.client.get_partial_messageable(int(place_id)).send(content, nonce=nonce)
        return str(sent.id)

    async def edit_message(self, place_id: str, message_id: str, content: str) -> None:
        channel = self.client.get_partial_messageable(int(place_id))
        await channel.get_partial_message(int(message_id)).edit(content=content)

    # -- incoming ----------------------------------------------------------------------------------
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or self._inbound is None:
            return
        if message.guild is not None and message.guild.id != self.guild_id:
            return
        await self._inbound.on_message(
            InboundMessage(
                message_id=str(message.id),
                place_id=str(message.channel.id),
                user_id=str(message.author.id),
                user_name=message.author.name,
                content=message.content,
            )
        )

    async def _run(self, interaction: discord.Interaction, name: str, **options: str) -> None:
        """Acknowledge at once (a takeover may wait seconds for a turn to stop; Discord wants
        an answer within three), run the command, and answer only its caller."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        assert self._inbound is not None
        call = CommandCall(
            name=name,
            user_id=str(interaction.user.id),
            place_id=str(interaction.channel_id),
            options=options,
        )
        try:
            text = await self._inbound.on_command(call)
        except Exception:
            log.exception("slash command /%s failed", name)
            text = "The hub could not run this command; its log says why."
        await interaction.followup.send(cut(text, REPLY_MAX), ephemeral=True)

    def _add_commands(self) -> None:
        guild = discord.Object(self.guild_id)
        run = self._run

        @app_commands.command(name="link", description="Link your Discord user to parley")
        @app_commands.describe(code="the code `parley discord link` gave you")
        async def link(interaction: discord.Interaction, code: str) -> None:
            await run(interaction, "link", code=code)

        @app_commands.command(name="takeover", description="Take over this post's worker")
        @app_commands.describe(instruction="what the worker must do instead")
        async def takeover(interaction: discord.Interaction, instruction: str) -> None:
            await run(interaction, "takeover", instruction=instruction)

        @app_commands.command(name="spawn-child", description="Give this worker a child task")
        @app_commands.describe(prompt="the child's task")
        async def spawn_child(interaction: discord.Interaction, prompt: str) -> None:
            await run(interaction, "spawn-child", prompt=prompt)

        @app_commands.command(name="cancel-child", description="Cancel a child of this worker")
        @app_commands.describe(child="the child's id or name")
        async def cancel_child(interaction: discord.Interaction, child: str) -> None:
            await run(interaction, "cancel-child", child=child)

        @app_commands.command(name="topology", description="This worker's session and children")
        async def topology(interaction: discord.Interaction) -> None:
            await run(interaction, "topology")

        @app_commands.command(name="relay", description="Send a message to a child worker")
        @app_commands.describe(child="the child's id or name", message="what to tell it")
        async def relay(interaction: discord.Interaction, child: str, message: str) -> None:
            await run(interaction, "relay", child=child, message=message)

        @app_commands.command(name="discuss", description="Open a discussion with agents")
        @app_commands.describe(members="agent ids, separated by spaces", guide="the topic")
        async def discuss(interaction: discord.Interaction, members: str, guide: str) -> None:
            await run(interaction, "discuss", members=members, guide=guide)

        commands: list[app_commands.Command[Any, Any, None]] = [
            link,
            takeover,
            spawn_child,
            cancel_child,
            topology,
            relay,
            discuss,
        ]
        for command in commands:
            self.tree.add_command(command, guild=guild)


# What the bot does in the forum (docs/discord.md): open posts, write in them, rename and archive
# the posts it opened, read the messages people write there.
NEEDED = {
    "view_channel": "View Channels",
    "send_messages": "Send Messages",
    "send_messages_in_threads": "Send Messages in Threads",
    "create_public_threads": "Create Public Threads",
    "manage_threads": "Manage Threads",
    "read_message_history": "Read Message History",
}


async def _permissions(
    client: discord.Client, guild_id: int, forum_id: int
) -> tuple[str, bool, str]:
    """The bot's permissions in the forum, from its roles and the forum's overwrites."""
    try:
        guild = await client.fetch_guild(guild_id)
        assert client.user is not None
        member = await guild.fetch_member(client.user.id)
        forum = await guild.fetch_channel(forum_id)
    except discord.HTTPException as exc:
        return ("permissions", False, f"cannot read the guild ({exc.status}); invite the bot")
    granted = forum.permissions_for(member)
    missing = [label for name, label in NEEDED.items() if not getattr(granted, name)]
    if missing:
        return ("permissions", False, f"grant the bot in the forum: {', '.join(missing)}")
    return ("permissions", True, "the bot may post, write, rename and archive in the forum")


async def check(token: str, *, guild_id: int, forum_channel_id: int) -> list[tuple[str, bool, str]]:
    """What ``parley discord check`` reports: each requirement, whether it holds, and what to
    do when it does not. Uses the REST API only (no gateway connection)."""
    results: list[tuple[str, bool, str]] = []
    client = discord.Client(intents=INTENTS)
    try:
        try:
            await client.login(token)
        except discord.LoginFailure:
            return [("bot token", False, "Discord refused it; reset the token and set it again")]
        results.append(("bot token", True, f"logged in as {client.user}"))
        app: Any = client.application
        flags = getattr(app, "flags", None)
        content = bool(
            flags and (flags.gateway_message_content or flags.gateway_message_content_limited)
        )
        results.append(
            (
                "message content intent",
                content,
                "enabled" if content else "enable Message Content Intent in the bot's settings",
            )
        )
        try:
            channel = await client.fetch_channel(forum_channel_id)
        except discord.HTTPException as exc:
            results.append(
                ("forum channel", False, f"cannot read it ({exc.status}); invite the bot")
            )
            return results
        if not isinstance(channel, discord.ForumChannel):
            results.append(("forum channel", False, "it is not a forum channel"))
            return results
        results.append(("forum channel", True, channel.name))
        if channel.guild.id != guild_id:
            results.append(("guild", False, "the forum channel is in another guild"))
            return results
        results.append(await _permissions(client, guild_id, channel.id))
        try:
            await client.http.get_guild_commands(client.application_id or 0, guild_id)
            results.append(("slash commands", True, "the bot may register guild commands"))
        except discord.HTTPException as exc:
            results.append(
                (
                    "slash commands",
                    False,
                    f"refused ({exc.status}); invite the bot with the applications.commands scope",
                )
            )
    finally:
        await client.close()
    return results
