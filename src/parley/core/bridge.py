"""Chat bridges (SPEC S6; seed 001 §2.5, §2.7, §3.4): what the hub shows on a chat platform and
what a chat platform may ask of the hub, as pure rules and one narrow port.

A worker's logical session is mirrored as a forum post whose title carries the worker's state;
a parent's post keeps ONE summary message of its children, edited in place. Messages are relayed
both ways exactly once: every relay is recorded under a dedupe key, and a message sent to the
platform carries a nonce derived from the hub message, so a resend after a crash is recognised
by the platform instead of posted twice. The service (``service/bridge.py``) applies these rules
with the store; the adapter (``adapters/bridges/discord.py``) implements :class:`ChatBridge`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Iterable, Mapping
from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from parley.core.channels import ChannelMessage

# The status emoji of seed 001 §2.7. ``stale`` and ``released`` keep a sleeping face but their
# post is archived; ``killed`` (a cancel) is not a failure of the work and says so.
STATUS_EMOJI: Mapping[str, str] = {
    "pending": "⏳",
    "running": "🏃",
    "idle": "💤",
    "stale": "💤",
    "released": "💤",
    "interrupted": "⚠️",
    "completed": "✅",
    "failed": "❌",
    "killed": "🛑",
}
# A post whose worker is released, stale or finished is archived (kept, folded away); a task
# result closes the post. A stale worker that shows life again is unarchived by the next sync.
ARCHIVED_STATES = frozenset({"stale", "released", "completed", "failed", "killed"})
# Children the parent's summary no longer lists (seed 001 §2.7: "总览不再展示").
HIDDEN_FROM_SUMMARY = frozenset({"stale", "released"})

TITLE_MAX = 100  # Discord's limit on a thread name
MESSAGE_MAX = 2000  # Discord's limit on a message's content
PARENT_SHORT_MAX = 24
NONCE_MAX = 25  # Discord's limit on a message nonce

PlaceKind = Literal["worker", "channel"]
Direction = Literal["in", "out"]


class BridgePlace(BaseModel):
    """A hub channel mirrored on the platform: a worker's forum post or a channel's thread.
    ``title``/``archived`` are what was last applied, so a sync edits only what changed."""

    id: str  # the hub channel id
    kind: PlaceKind
    worker_id: str | None = None
    place_id: str  # the platform's thread (or channel) id
    title: str = ""
    archived: bool = False
    summary_message_id: str | None = None
    summary_text: str = ""
    last_seq: int = 0  # the last hub channel message relayed out (or skipped)
    created: datetime


class BridgeRelay(BaseModel):
    """One relayed message, under its dedupe key (:func:`relay_key`)."""

    id: str
    hub_message_id: str | None = None
    platform_message_id: str | None = None
    created: datetime


class BridgeLink(BaseModel):
    """A platform user bound to a hub human principal; ``id`` is the platform's user id."""

    id: str
    principal_id: str
    created: datetime


class LinkCode(BaseModel):
    """A one-time code that proves a platform user is the hub human who asked for it; only
    its hash is stored, and it is deleted once used or expired."""

    id: str  # sha256 of the code
    principal_id: str
    expires: datetime
    used: bool = False  # codes are deleted when used now; an older hub marked them
    created: datetime


class PostRef(BaseModel):
    """A post the platform created: its thread and its first message."""

    place_id: str
    message_id: str


class InboundMessage(BaseModel):
    """A person's message on the platform, in a place the bridge may map to a hub channel."""

    message_id: str
    place_id: str
    user_id: str
    user_name: str = ""
    content: str


CommandName = Literal[
    "link", "takeover", "spawn-child", "cancel-child", "topology", "relay", "discuss"
]
COMMAND_NAMES: tuple[str, ...] = (
    "link",
    "takeover",
    "spawn-child",
    "cancel-child",
    "topology",
    "relay",
    "discuss",
)


class CommandCall(BaseModel):
    """A slash command a platform user ran in a place; ``options`` by name."""

    name: CommandName
    user_id: str
    place_id: str
    options: dict[str, str] = Field(default_factory=dict)


class Inbound(Protocol):
    """What the bridge service offers the adapter for what people do on the platform."""

    def on_message(self, message: InboundMessage) -> Awaitable[None]: ...
    def on_command(self, call: CommandCall) -> Awaitable[str]:
        """Run the command; the text is the reply only its caller sees."""
        ...


class ChatBridge(Protocol):
    """What the hub needs from a chat platform (Discord today). Ids are the platform's, as
    strings. Rate limits are the adapter's to honour: a call returns once it succeeded."""

    async def start(self, inbound: Inbound) -> None:
        """Log in and begin delivering people's messages and commands to ``inbound``."""
        ...

    async def close(self) -> None: ...
    async def create_post(self, title: str, content: str) -> PostRef:
        """A new post in the configured forum, with its first message."""
        ...

    async def edit_post(self, place_id: str, *, title: str, archived: bool) -> None: ...
    async def send(self, place_id: str, content: str, *, nonce: str) -> str:
        """Post a message; a second send with the same ``nonce`` must not post it twice.
        Returns the platform's message id."""
        ...

    async def edit_message(self, place_id: str, message_id: str, content: str) -> None: ...


# -- titles, summaries and texts ------------------------------------------------------------------
def one_line(text: str) -> str:
    """The first non-empty line of ``text`` with its whitespace collapsed."""
    for line in text.strip().splitlines():
        if line.strip():
            return re.sub(r"\s+", " ", line).strip()
    return ""


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def last_part(session_name: str) -> str:
    """A session's own name: the last part of its display name (``"auth-refactor /
    owasp-csrf"`` → ``"owasp-csrf"``)."""
    return session_name.rsplit(" / ", 1)[-1].strip() or session_name


def parent_short(session_name: str) -> str:
    """The short name of a parent in its children's titles."""
    return cut(last_part(session_name), PARENT_SHORT_MAX)


def post_title(state: str, parent: str, prompt: str) -> str:
    """``<emoji> [<parent short name>]: <prompt summary>``, within Discord's 100 characters."""
    head = f"{STATUS_EMOJI.get(state, '❔')} [{parent}]: "
    return head + cut(one_line(prompt) or "(no prompt)", TITLE_MAX - len(head))


def discussion_title(name: str, status: str) -> str:
    """A discussion channel's post title: 💬 while it runs, 🔒 once closed."""
    return cut(f"{'💬' if status == 'active' else '🔒'} {one_line(name)}", TITLE_MAX)


def discussion_of(event: object) -> str | None:
    """The discussion channel an event of the hub's log created or closed, if any."""
    if not isinstance(event, dict):
        return None
    subject = str(event.get("subject", ""))
    kind = event.get("payload", {}).get("kind")
    if event.get("type") == "channel.created" and kind == "discussion":
        return subject.removeprefix("channel:")
    if str(event.get("type", "")).startswith("discussion.") and subject.startswith("channel:"):
        return subject.removeprefix("channel:")
    return None


def is_archived(state: str) -> bool:
    return state in ARCHIVED_STATES


def dispatch_summary(parent: str, prompt: str, purpose: str) -> str:
    """The first message of a child's post: the task-dispatch in short."""
    return cut(f"**Task from {parent}** ({purpose})\n\n{prompt.strip()}", MESSAGE_MAX)


class ChildLine(BaseModel):
    """One child in its parent's summary."""

    name: str
    state: str
    note: str = ""


def summary_text(parent_name: str, children: Iterable[ChildLine]) -> str:
    """The parent's ONE summary message: a line per child still worth showing, with its state
    emoji and, when finished, its result in short."""
    lines = [f"**Children of {parent_name}**"]
    shown = [c for c in children if c.state not in HIDDEN_FROM_SUMMARY]
    for child in shown:
        emoji = STATUS_EMOJI.get(child.state, "❔")
        note = f": {cut(one_line(child.note), 80)}" if child.note.strip() else ""
        lines.append(f"{emoji} {child.name} — {child.state}{note}")
    if not shown:
        lines.append("(no children to show)")
    return cut("\n".join(lines), MESSAGE_MAX)


def relay_text(message: ChannelMessage) -> str:
    """A hub message as the bot posts it: who said it, then what, within one platform
    message (the whole text stays in the hub)."""
    who = {"moderator": "🧭 moderator", "system": "⚙️ hub"}.get(
        message.sender_kind, message.sender_id
    )
    body = message.content.strip() or "(empty)"
    text = f"**{who}**: {body}"
    if len(text) > MESSAGE_MAX:
        note = "\n(truncated; the whole text is in the hub)"
        text = cut(text, MESSAGE_MAX - len(note)) + note
    return text


def should_relay_out(message: ChannelMessage, *, worker_post: bool) -> bool:
    """A hub message goes out unless it came from the platform (no echo) or is the task the
    worker's post already opens with (a child's dispatch, a root worker's first prompt)."""
    meta = message.metadata
    if meta.get("via") == "discord" or "dispatch_message_id" in meta:
        return False
    return not (worker_post and message.seq == 1 and message.sender_kind == "system")


# -- dedupe ---------------------------------------------------------------------------------------
def relay_key(direction: Direction, message_id: str) -> str:
    """The dedupe key of one relay: the source side's message id and the direction."""
    return f"{direction}:{message_id}"


def nonce_for(hub_message_id: str) -> str:
    """A platform nonce for a hub message (Discord takes at most 25 characters): the same
    message always gets the same nonce, so a resend after a crash is not posted twice."""
    return "p" + hashlib.sha256(hub_message_id.encode()).hexdigest()[: NONCE_MAX - 1]


def code_hash(code: str) -> str:
    return hashlib.sha256(code.strip().encode()).hexdigest()
