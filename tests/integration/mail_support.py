"""Helpers shared by the mail tests."""

from __future__ import annotations

from typing import Any

from parley.core.identity import Principal
from parley.core.mail import Message, SendRequest
from parley.service.hub import Hub

MAILROOM_KINDS = ("task", "report", "handoff", "blocker", "notice")
SESSION_KINDS = (
    "task-dispatch",
    "task-result",
    "cancel",
    "takeover",
    "context-inject",
    "status-update",
    "info",
)
ALL_KINDS = (*MAILROOM_KINDS, *SESSION_KINDS, "minutes")


async def send(hub: Hub, sender: Principal, to: str, kind: str = "task", **fields: Any) -> Message:
    """Send through the service layer as ``sender``."""
    return (await hub.mail.send(sender, SendRequest(to=to, kind=kind, **fields))).message


async def all_messages(hub: Hub) -> list[Message]:
    """Every stored message row, in id order."""
    async with hub.store.read() as tx:
        c = tx.table("messages").c
        rows: list[Message] = await tx.select("messages", order_by=[c.id])
    return rows


async def main_session_id(hub: Hub, agent_id: str) -> str:
    """The agent's main session: its session in its work channel."""
    agent = await hub.identity.require(agent_id)
    assert agent.work_channel_id is not None
    async with hub.store.read() as tx:
        session = await tx.session_for(agent_id, agent.work_channel_id)
    assert session is not None
    return session.id
