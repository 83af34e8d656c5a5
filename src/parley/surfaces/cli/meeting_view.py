"""The live view of a meeting in a terminal (``parley room watch``): its topic, round x/y, who is
present, awaiting entry or absent, the transcript as it grows with each speaker's runtime and
model, humans' interjections, and how the meeting ended.

``watch_meeting`` follows the meeting's SSE stream until the meeting ends; ``MeetingScreen`` only
prints, so the demo renders its meeting with the same lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.text import Text

from parley.surfaces.cli.client import STREAM_OPENED, HubClient
from parley.surfaces.cli.output import print_json_line
from parley.surfaces.cli.transcript import SENDER_STYLES, Spinner


def names(items: Iterable[str] | None) -> str:
    return ", ".join(items or []) or "-"


def voice(message: dict[str, Any]) -> str:
    """Who produced a message: a speech's runtime and model route, else the sender's kind (none
    for the moderator's and the system's notes, whose sender says it)."""
    kind = str(message.get("sender_kind") or "agent")
    if kind != "agent":
        return "" if message.get("sender_id") == kind else kind
    meta = message.get("metadata") or {}
    runtime = str(meta.get("runtime") or "")
    route = str(meta.get("model_route") or "")
    if route and route != runtime:
        return f"{runtime} · {route}" if runtime else route
    return runtime or kind


def roster(view: dict[str, Any]) -> str:
    """Present / awaiting / absent, the empty groups left out (present always shown)."""
    parts = [f"present: {names(view.get('present'))}"]
    if view.get("awaiting"):
        parts.append(f"awaiting: {names(view['awaiting'])}")
    if view.get("absent"):
        parts.append(f"absent: {names(view['absent'])}")
    return " · ".join(parts)


class MeetingScreen:
    """Prints a meeting's state when it changes and each message once; in machine mode, one JSON
    document per line (``{"event": "message"|"meeting", "data": …}``) as the stream sent it."""

    def __init__(self, console: Console, *, machine: bool) -> None:
        self.console = console
        self.machine = machine
        self.seen: set[str] = set()
        # The position of the latest message shown: what the stream has not delivered follows it.
        self.last_seq = 0
        self.view: dict[str, Any] | None = None
        self.round = 0
        self._shown: tuple[Any, ...] | None = None
        self.spinner = Spinner(console, "waiting for the meeting…", machine=machine)

    @contextmanager
    def live(self) -> Iterator[MeetingScreen]:
        """A spinner with the round and the roster while the meeting runs, on a terminal only."""
        with self.spinner.running():
            yield self

    @property
    def ended(self) -> bool:
        return self.view is not None and self.view.get("status") == "ended"

    def header(self, view: dict[str, Any]) -> None:
        """Which meeting this is: its id, room, convener, moderator and topic."""
        if self.machine:
            return
        self.console.print(
            Text(
                f"meeting {view['id']} in room {view['room_id']}, convened by "
                f"{view['convened_by']} (moderator: {view.get('moderator_route') or '-'})",
                style="bold",
            )
        )
        self.console.print(Text(f"topic: {view['topic']}", style="bold"))

    def meeting(self, view: dict[str, Any]) -> None:
        """A state of the meeting: whoever entered since the last one, a new round, the end."""
        before, self.view = self.view, view
        if self.machine:
            print_json_line({"event": "meeting", "data": view})
            return
        self.round = max(self.round, int(view.get("round") or 0))
        for agent in view.get("present") or []:
            if before is not None and agent not in (before.get("present") or []):
                self.console.print(
                    Text(f"── {agent} entered late: its turn in flight has ended", "yellow")
                )
        if view.get("status") == "ended":
            self._end(view)
        else:
            self._state()

    def message(self, m: dict[str, Any]) -> None:
        """One transcript message (deduplicated by id: a resumed stream may repeat one)."""
        if m["id"] in self.seen:
            return
        self.seen.add(m["id"])
        self.last_seq = max(self.last_seq, int(m.get("seq") or 0))
        if self.machine:
            print_json_line({"event": "message", "data": m})
            return
        spoken = int(m.get("round") or 0)
        # The hub sends the meeting's state on convening, entry and end; a new round shows first
        # in the round of its first speech.
        if spoken > self.round and self.view is not None and not self.ended:
            self.round = spoken
            self._state()
        kind = str(m.get("sender_kind") or "agent")
        line = Text()
        if spoken:
            line.append(f"[r{spoken}] ", style="dim")
        line.append(str(m.get("sender_id", "?")), style=f"bold {SENDER_STYLES.get(kind, '')}")
        label = voice(m)
        if label:
            line.append(f" ({label})", style="dim")
        line.append(": ")
        line.append(str(m.get("content", "")))
        self.console.print(line)

    def _state(self) -> None:
        view = self.view
        assert view is not None
        shown = (self.round, tuple(view.get("present") or ()), tuple(view.get("awaiting") or ()))
        if shown == self._shown:
            return
        self._shown = shown
        state = f"round {self.round}/{view['max_rounds']} · {roster(view)}"
        self.console.print(Text(f"── {state}", style="yellow"))
        self.spinner.update(f"{state} · waiting for the next speech…")

    def _end(self, view: dict[str, Any]) -> None:
        parts = [
            f"meeting ended: {view.get('end_reason') or 'unknown'}",
            f"{view.get('speeches', 0)} speeches",
            f"round {self.round}/{view['max_rounds']}",
            roster(view),
        ]
        self.console.print(Text("── " + " · ".join(parts), style="bold yellow"))
        if view.get("error"):
            self.console.print(Text(f"   {view['error']}", style="red"))

    def minutes(self, rows: list[dict[str, Any]]) -> None:
        """Which members got their own minutes (the texts are shown by ``room minutes``)."""
        if self.machine or not rows:
            return
        got = ", ".join(f"{r['agent_id']} ({r['status']})" for r in rows)
        self.console.print(Text(f"── minutes: {got}", style="yellow"))


def watch_meeting(
    hub: HubClient,
    meeting_id: str,
    screen: MeetingScreen,
    *,
    initial: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Render a meeting from its SSE stream until it ends; returns its final state (None when
    the stream ended first). A meeting that has already ended is shown whole at once."""
    if not screen.machine:
        if initial is None:
            initial = hub.get(f"/v1/rooms/meetings/{meeting_id}")
        screen.header(initial)
        if initial.get("status") != "ended":
            screen.meeting(initial)
        # An ended meeting: the stream's backfill shows its transcript, then how it ended.
    with screen.live():
        for event in hub.stream(f"/v1/rooms/meetings/{meeting_id}/stream"):
            if event.event == STREAM_OPENED:
                continue
            if event.event == "message":
                screen.message(event.json())
            elif event.event == "meeting":
                view: dict[str, Any] = event.json()
                if view.get("status") == "ended":
                    # The closing note and the final state are published one after the other;
                    # print any message the stream has not delivered yet before the end.
                    for rows, _ in hub.pages(
                        f"/v1/rooms/meetings/{meeting_id}/transcript", after_seq=screen.last_seq
                    ):
                        for m in rows:
                            screen.message(m)
                    screen.meeting(view)
                    screen.minutes(hub.get(f"/v1/rooms/meetings/{meeting_id}/minutes"))
                    return view
                screen.meeting(view)
    return None
