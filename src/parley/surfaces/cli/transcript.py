"""Live transcript rendering for channels, groups and discussions.

``watch_channel`` prints the latest messages, then follows the channel's SSE stream: each message
with its speaker, role and round, and each change of a discussion task's state. Without
``follow`` it ends when the tasks it saw running have finished, so a script can wait for a
discussion to end with one command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.text import Text

from parley.surfaces.cli.client import STREAM_OPENED, HubClient
from parley.surfaces.cli.output import print_json_line, when_short

SENDER_STYLES = {"moderator": "magenta", "system": "dim", "human": "green", "agent": "cyan"}
BACKLOG = 50


def task_state(task: dict[str, Any]) -> str:
    members = ", ".join(task.get("members") or [])
    head = f"task {task['id']} ({task.get('mode')})"
    if task.get("status") == "finished":
        parts = [f"{head} finished: {task.get('end_reason') or 'unknown'}"]
        parts.append(f"{task.get('accepted', 0)}/{task.get('calls', 0)} replies accepted")
        if task.get("failed_member"):
            parts.append(f"failed member {task['failed_member']}")
        if task.get("error"):
            parts.append(str(task["error"]))
        return "; ".join(parts)
    return f"{head} running: round {task.get('current_round', 0)}/{task.get('rounds')} · {members}"


class Spinner:
    """A status line that spins while a live view runs, on a terminal only (never in machine
    mode, nor when the output is piped)."""

    def __init__(self, console: Console, waiting: str, *, machine: bool) -> None:
        self.console = console
        self.waiting = waiting
        self.machine = machine
        self._status: Status | None = None

    @contextmanager
    def running(self) -> Iterator[None]:
        if not self.machine and self.console.is_terminal:
            self._status = self.console.status(self.waiting)
            self._status.start()
        try:
            yield
        finally:
            if self._status is not None:
                self._status.stop()
                self._status = None

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(text)


class TranscriptView:
    """Prints messages and task changes; a spinner shows the running task on a terminal."""

    def __init__(self, console: Console, *, machine: bool) -> None:
        self.console = console
        self.machine = machine
        self.seen: set[str] = set()
        self.spinner = Spinner(console, "waiting for messages…", machine=machine)

    @contextmanager
    def live(self) -> Iterator[TranscriptView]:
        with self.spinner.running():
            yield self

    def message(self, m: dict[str, Any]) -> None:
        if m["id"] in self.seen:
            return  # a resumed stream may repeat a message; messages are deduplicated by id
        self.seen.add(m["id"])
        if self.machine:
            print_json_line({"event": "message", "data": m})
            return
        kind = m.get("sender_kind", "agent")
        line = Text()
        if m.get("created"):
            line.append(f"{when_short(m['created'])} ", style="dim")
        if m.get("round"):
            line.append(f"[r{m['round']}] ", style="dim")
        line.append(m.get("sender_id", "?"), style=f"bold {SENDER_STYLES.get(kind, '')}".strip())
        if kind != "agent":
            line.append(f" ({kind})", style="dim")
        line.append(": ")
        line.append(m.get("content", ""))
        self.console.print(line)

    def task(self, t: dict[str, Any]) -> None:
        if self.machine:
            print_json_line({"event": "task", "data": t})
            return
        state = task_state(t)
        style = "yellow" if t.get("status") != "finished" else "bold yellow"
        self.console.print(Text(f"── {state}", style=style))
        self.spinner.update(state if t.get("status") != "finished" else "waiting…")


def print_backlog(view: TranscriptView, hub: HubClient, channel_id: str, latest: int) -> int:
    """Print the latest messages; returns the last seq printed (0 when none)."""
    if latest <= 0:
        channel = hub.get(f"/v1/channels/{channel_id}")
        return int(channel.get("last_seq") or 0)
    messages = hub.get(f"/v1/channels/{channel_id}/messages", latest=latest)
    last = 0
    for m in messages:
        view.message(m)
        last = max(last, int(m["seq"]))
    return last


def running_tasks(hub: HubClient, channel_id: str) -> set[str]:
    pages = hub.pages(f"/v1/channels/{channel_id}/tasks")
    return {t["id"] for page, _ in pages for t in page if t.get("status") != "finished"}


def watch_channel(
    hub: HubClient,
    channel_id: str,
    view: TranscriptView,
    *,
    follow: bool,
    latest: int = BACKLOG,
    after: int | None = None,
    task_id: str | None = None,
) -> dict[str, Any] | None:
    """Render a channel live, from the ``latest`` messages or from after the seq ``after``.
    Returns the last finished task seen (None when none)."""
    last = after if after is not None else print_backlog(view, hub, channel_id, latest)
    waiting: set[str] = set()
    finished: dict[str, Any] | None = None
    opened = False
    with view.live():
        for event in hub.stream(f"/v1/channels/{channel_id}/stream", last_id=str(last)):
            if event.event == STREAM_OPENED:
                if opened or follow:
                    continue
                opened = True
                # The hub subscribed before it answered: a task looked up now cannot finish
                # unseen, its end arrives on the stream.
                waiting = running_tasks(hub, channel_id)
                if task_id is not None:
                    task = hub.get(f"/v1/tasks/{task_id}")
                    if task.get("status") == "finished":
                        finished = task
                    else:
                        waiting.add(task_id)
                if not waiting:
                    # It all happened before we connected: show the rest and how it ended.
                    flush_new(view, hub, channel_id, last)
                    if finished is not None:
                        view.task(finished)
                    return finished
            elif event.event == "message":
                message = event.json()
                view.message(message)
                last = max(last, int(message.get("seq") or 0))
            elif event.event == "task":
                task = event.json()
                view.task(task)
                if task.get("status") != "finished":
                    waiting.add(task["id"])
                    continue
                waiting.discard(task["id"])
                finished = task
                # A superseded task is followed by the task of the newer message.
                if not follow and not waiting and task.get("end_reason") != "superseded":
                    return finished
    return finished


def flush_new(view: TranscriptView, hub: HubClient, channel_id: str, after: int) -> None:
    for m in hub.get(f"/v1/channels/{channel_id}/messages", after_seq=after, limit=1000):
        view.message(m)
