"""A remote meeting member: its own process, its own MCP client over Streamable HTTP (the
``rooms`` profile), its own token.

    PARLEY_TOKEN=... python meeting_member.py --url http://127.0.0.1:PORT --room ROOM [--convene T]

It follows what the room tools' descriptions teach: ``join_room``; with ``--convene`` it waits
for one line on stdin (everyone has joined) and convenes the room on that topic; then it takes
its meeting turns with ``wait_for_turn`` → ``speak`` (each speech names whom it answers, read
from ``meeting_status``), writes its own minutes when the last turn asks for them, finds them in
its inbox, answers the wake in its work channel and reports the meeting's end. Each step is one
JSON line on stdout; the exit status is 0 when it ran to its end.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from mcp import Client
from mcp_agent import (
    MAX_WAITS,
    WAIT_S,
    ProtocolBroken,
    arguments,
    call,
    connect,
    emit,
    next_turn,
    run_agent,
)

MINUTES_ASKED = "Write YOUR minutes"


async def speech(client: Client, me: str, number: int) -> tuple[str, list[str], dict[str, Any]]:
    """A speech that names the others heard so far, from the meeting's status."""
    status = await call(client, "meeting_status", recent=10)
    meeting = status["meeting"]
    if meeting is None or meeting["status"] != "running":
        raise ProtocolBroken(f"a speech turn but no running meeting: {status}")
    heard = sorted({r["speaker"] for r in meeting.get("recent", []) if r["kind"] == "agent"} - {me})
    if heard:
        text = f"{me}, speech {number}: answering {', '.join(heard)}; I take my part."
    else:
        text = f"{me}, speech {number}: I stand at the index; I need the schema."
    return text, heard, meeting


async def minutes_mail(client: Client, meeting_id: str) -> dict[str, Any]:
    """Block on the inbox until this meeting's minutes arrive, skipping the turn notices."""
    for _ in range(MAX_WAITS * 10):
        got = await call(client, "wait_for_mail", timeout_s=WAIT_S)
        if got["timed_out"]:
            raise ProtocolBroken(f"no minutes within {WAIT_S:g}s")
        for msg in got["messages"]:
            if msg["kind"] == "minutes" and msg["payload"].get("meeting_id") == meeting_id:
                return dict(msg)
    raise ProtocolBroken("no minutes among the mail")


async def attend(client: Client, me: dict[str, Any]) -> None:
    """Take meeting turns until the minutes turn, then collect the minutes and the wake."""
    spoken = 0
    meeting: dict[str, Any] | None = None
    while True:
        turn = await next_turn(client)
        if meeting is not None and turn["channel_id"] != meeting["channel_id"]:
            raise ProtocolBroken(f"a turn in {turn['channel_id']!r}, not the meeting")
        if MINUTES_ASKED in turn["prompt"]:
            break
        if "[Meeting]" not in turn["prompt"]:
            raise ProtocolBroken(f"a turn that is no meeting speech: {turn['prompt'][:200]!r}")
        spoken += 1
        text, heard, meeting = await speech(client, me["id"], spoken)
        await call(client, "speak", turn_id=turn["turn_id"], text=text)
        emit("spoke", round=turn["round"], meeting_id=meeting["meeting_id"], heard=heard, text=text)
    if meeting is None:
        raise ProtocolBroken("asked for minutes without having spoken")
    minutes = f"{me['id']}'s minutes: I spoke {spoken} times; my part of the schema is mine."
    await call(client, "speak", turn_id=turn["turn_id"], text=minutes)
    emit("minutes_written", text=minutes)

    mail = await minutes_mail(client, meeting["meeting_id"])
    emit("minutes_received", text=mail["body"])
    wake = await next_turn(client)
    if wake["channel_id"] != me["work_channel_id"]:
        raise ProtocolBroken(f"the minutes woke {wake['channel_id']!r}, not the work channel")
    await call(client, "speak", turn_id=wake["turn_id"], text="Minutes noted; back to work.")
    emit("woken", minutes_in_prompt=minutes in wake["prompt"])
    status = await call(client, "meeting_status", meeting_id=meeting["meeting_id"], recent=0)
    ended = status["meeting"]
    emit("ended", status=ended["status"], end_reason=ended.get("end_reason"))


async def run(url: str, token: str, room_id: str, topic: str | None) -> None:
    async with connect(url, token, profile="rooms") as client:
        me = await call(client, "whoami")
        joined = await call(client, "join_room", room_id=room_id)
        emit("joined", id=me["id"], room_id=joined["room_id"], state=joined["state"])
        if topic is not None:
            # The test says when every member has joined: a summons reaches members only.
            await asyncio.to_thread(sys.stdin.readline)
            convened = await call(client, "convene", topic=topic)
            emit("convened", meeting_id=convened["meeting_id"], present=convened["present"])
        await attend(client, me)
        emit("done")


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--room", required=True, help="the room to join")
    parser.add_argument("--convene", default=None, help="convene the room on this topic")
    args = parser.parse_args()
    return run_agent(run(args.url, os.environ["PARLEY_TOKEN"], args.room, args.convene))


if __name__ == "__main__":
    sys.exit(main())
