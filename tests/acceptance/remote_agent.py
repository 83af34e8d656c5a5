"""A small remote agent: its own process, its own MCP client over Streamable HTTP, its own token.

    PARLEY_TOKEN=... python remote_agent.py --url http://127.0.0.1:PORT [--open bob,cat]

It follows the discussion protocol the tool descriptions teach: ``wait_for_turn`` → ``speak``
(replies that name what the others said; a vote ``[[DISCUSSION_DONE]]`` from round 2). With
``--open`` it is the initiator: it opens the discussion from its work channel with those
members, and once its inbox says the rounds have ended it writes the summary inside its
workspace, calls ``discuss_callback`` and waits for the result-ready wake in its work channel.
Each step is one JSON line on stdout; the exit status is 0 when the protocol ran to its end.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client
from mcp_agent import (
    WAIT_S,
    ProtocolBroken,
    ToolRefused,
    arguments,
    call,
    connect,
    emit,
    next_turn,
    run_agent,
)

DONE_MARKER = "[[DISCUSSION_DONE]]"
VOTE_FROM_ROUND = 2
GUIDE = "Decide how the hub should name its discussion summary files, and why."


async def reply_for(client: Client, me: str, turn: dict[str, Any]) -> tuple[str, list[str]]:
    """A reply that answers the latest message of each other participant, by name and seq."""
    read = await call(client, "read_channel", channel_id=turn["channel_id"], since_seq=0, limit=500)
    latest: dict[str, int] = {}
    for msg in read["messages"]:
        if msg["sender_kind"] == "agent" and msg["sender"] != me:
            latest[msg["sender"]] = msg["seq"]
    if latest:
        heard = ", ".join(f"{who} (#{seq})" for who, seq in sorted(latest.items()))
        text = f"{me}, round {turn['round']}: answering {heard}: name them by channel and date."
    else:
        text = f"{me}, round {turn['round']}: opening. I propose <channel>-<date>.md."
    if turn["round"] >= VOTE_FROM_ROUND:
        text += f" I can live with that. {DONE_MARKER}"
    return text, sorted(latest)


async def discuss(client: Client, me: str, channel_id: str | None) -> str:
    """Take turns until this agent has voted; returns the discussion channel id."""
    while True:
        turn = await next_turn(client, waits=1)
        channel_id = channel_id or turn["channel_id"]
        if turn["channel_id"] != channel_id:
            raise ProtocolBroken(f"a turn in {turn['channel_id']!r}, not the discussion")
        text, heard = await reply_for(client, me, turn)
        try:
            await call(client, "speak", turn_id=turn["turn_id"], text=text)
        except ToolRefused as exc:
            if exc.code != "new_message":
                raise
            emit("superseded", turn_id=turn["turn_id"])
            continue
        emit("spoke", round=turn["round"], channel_id=channel_id, heard=heard, text=text)
        if DONE_MARKER in text:
            return channel_id


async def notice_to_finish(client: Client, channel_id: str) -> dict[str, Any]:
    """Block on the inbox until the hub says the rounds of this discussion have ended."""
    while True:
        got = await call(client, "wait_for_mail", timeout_s=WAIT_S)
        if got["timed_out"]:
            raise ProtocolBroken(f"no notice to finish within {WAIT_S:g}s")
        for msg in got["messages"]:
            payload = msg.get("payload") or {}
            if payload.get("next") == "discuss_callback" and payload["channel_id"] == channel_id:
                return dict(msg)


async def finish(client: Client, me: dict[str, Any], channel_id: str) -> None:
    notice = await notice_to_finish(client, channel_id)
    emit("rounds_ended", end_reason=notice["payload"]["end_reason"])
    transcript = await call(client, "read_channel", channel_id=channel_id, since_seq=0, limit=500)
    said = [
        f"- {m['sender']} (round {m['round']}): {m['content']}"
        for m in transcript["messages"]
        if m["sender_kind"] == "agent"
    ]
    summary = Path(me["workspace"]) / "discussions" / "summary-names.md"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(
        "# Summary file names\n\nDecision: <channel>-<date>.md\n\n" + "\n".join(said)
    )
    closed = await call(client, "discuss_callback", summaryPath="discussions/summary-names.md")
    emit("callback", status=closed["status"], summary_path=closed["discussion"]["summaryPath"])

    wake = await next_turn(client, waits=1)
    if wake["channel_id"] != me["work_channel_id"]:
        raise ProtocolBroken(f"the wake came in {wake['channel_id']!r}, not the work channel")
    inbox = await call(client, "check_inbox", kind="notice")
    noticed = any(m["payload"].get("turn_id") == wake["turn_id"] for m in inbox["messages"])
    emit(
        "woken",
        channel_id=wake["channel_id"],
        prompt_names_summary=closed["discussion"]["summaryPath"] in wake["prompt"],
        noticed_in_inbox=noticed,
    )
    await call(client, "speak", turn_id=wake["turn_id"], text="Summary read; back to my task.")


async def run(url: str, token: str, members: list[str]) -> None:
    async with connect(url, token) as client:
        me = await call(client, "whoami")
        emit("ready", id=me["id"], work_channel_id=me["work_channel_id"])
        channel_id = None
        if members:
            opened = await call(
                client,
                "create_private_channel",
                name="summary names",
                members=members,
                callbackChannelId=me["work_channel_id"],
                discussGuide=GUIDE,
            )
            channel_id = opened["id"]
            emit("opened", channel_id=channel_id, members=opened["members"])
        channel_id = await discuss(client, me["id"], channel_id)
        if members:
            await finish(client, me, channel_id)
        emit("done")


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--open", default="", help="members to open a discussion with")
    args = parser.parse_args()
    members = [m for m in args.open.split(",") if m]
    return run_agent(run(args.url, os.environ["PARLEY_TOKEN"], members))


if __name__ == "__main__":
    sys.exit(main())
