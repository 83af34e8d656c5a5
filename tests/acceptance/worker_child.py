"""A remote child worker: its own process, its own MCP client over Streamable HTTP (the
``workers`` profile), its own token.

    PARLEY_TOKEN=... python worker_child.py --url http://127.0.0.1:PORT

It follows what the worker tools' descriptions teach: ``wait_for_turn`` brings its
task-dispatch turn; it finds its worker with ``worker_status``, does the task (counts the
words of the prompt's first line) and finishes with ``report_result``, attaching an artifact
name. Each step is one JSON line on stdout; the exit status is 0 when it ran to its end.
"""

from __future__ import annotations

import os
import sys

from mcp_agent import ProtocolBroken, arguments, call, connect, emit, next_turn, run_agent


async def run(url: str, token: str) -> None:
    async with connect(url, token, profile="workers") as client:
        me = await call(client, "whoami")
        emit("ready", id=me["id"])
        turn = await next_turn(client)
        if "# Task from" not in turn["prompt"]:
            raise ProtocolBroken(f"the first turn is no task-dispatch: {turn['prompt'][:200]!r}")
        mine = await call(client, "worker_status", state=["running"])
        [worker] = [w for w in mine["workers"] if w["channel_id"] == turn["channel_id"]]
        emit("dispatched", worker_id=worker["id"], channel_id=turn["channel_id"])
        # The task is the sender's text, quoted by the hub: ``> `` before each line.
        quoted = turn["prompt"].split("# Task from", 1)[1].split("\n\n", 2)[1].strip()
        task = "\n".join(line.removeprefix(">").removeprefix(" ") for line in quoted.splitlines())
        summary = f"{me['id']} counted {len(task.split())} words in: {task}"
        done = await call(
            client,
            "report_result",
            worker_id=worker["id"],
            summary=summary,
            artifacts=["word-count.txt"],
        )
        emit("reported", state=done["state"], summary=summary)


def main() -> int:
    args = arguments(__doc__).parse_args()
    return run_agent(run(args.url, os.environ["PARLEY_TOKEN"]))


if __name__ == "__main__":
    sys.exit(main())
