"""The meeting driver (R4–R9, R11): the in-process run of a convened meeting — its rounds, the
moderator's picks, each speech, and its end with minutes and dismissal.

:class:`~.meetings.Meetings` builds on it with convening, human interjections, the emergency
stop, queries and recovery; this module is what runs between a meeting's start and its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from parley.core import meetings as mt
from parley.core.channels import TRANSCRIPT_WINDOW, ChannelMessage, Task
from parley.core.errors import RuntimeFailure
from parley.core.identity import MODERATOR_ID, Principal
from parley.core.ids import new_ulid
from parley.core.ports import Runtime, Tx
from parley.core.redact import redact_text
from parley.core.rooms import (
    DEFAULT_MINUTES_LIMIT,
    Meeting,
    MeetingEndReason,
    Minutes,
    Room,
    RoomMember,
)
from parley.core.runtime import AgentProfile, Prompt, TranscriptEntry, TurnResult, Usage
from parley.service.context import ServiceContext
from parley.service.conversations import runners
from parley.service.conversations.channels import Channels
from parley.service.conversations.tasks import TaskRunner
from parley.service.conversations.transcripts import channel_topic
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail
from parley.service.meetings.rooms import Rooms
from parley.service.meetings.voices import SpeakerContext, Voices, entries, meeting_turn

log = logging.getLogger("parley.meetings")


@dataclass
class LiveMeeting:
    """In-process state of a meeting this hub drives."""

    meeting_id: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    # Transcript entries by message id: each message is rendered once for all the prompts.
    rendered: dict[str, TranscriptEntry] = field(default_factory=dict)


@dataclass(frozen=True)
class GivenTurn:
    """A turn the moderator gave, as read in the transaction recording it: the meeting row,
    what the speaker's prompt needs, and the messages committed since the window was read."""

    meeting: Meeting
    context: SpeakerContext
    fresh: list[ChannelMessage]


def moderates(convener: Principal) -> bool:
    """Whether the convener's own model moderates: an agent with a runtime the hub can call (not
    a human, not a remote agent)."""
    return convener.kind == "agent" and convener.runtime_kind not in ("none", "remote")


class MeetingDriver:
    """Drives the meetings this hub convened or took over, each in an asyncio task of its own."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        channels: Channels,
        tasks: TaskRunner,
        mail: Mail,
        rooms: Rooms,
        runtime_for: Callable[[Principal], Runtime | None],
        runtime_for_config: Callable[[str, dict[str, Any]], Runtime | None],
        hub_id: str,
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.channels = channels
        self.tasks = tasks
        self.mail = mail
        self.rooms = rooms
        self.runtime_for = runtime_for
        self.runtime_for_config = runtime_for_config
        self.hub_id = hub_id
        self.live: dict[str, LiveMeeting] = {}
        self.voices = Voices(ctx, identity, channels, tasks, mail, runtime_for)
        # A member awaiting entry enters at its turn's end (its work-unit boundary, R2).
        tasks.hooks.on_finished(self.on_task_finished)

    def _publish(self, tx: Tx, meeting: Meeting) -> None:
        data = {"type": "meeting", "meeting": meeting.model_dump(mode="json")}
        topic = channel_topic(meeting.channel_id)
        self.ctx.bus.publish_on_commit(tx, topic, data)

    def launch(self, meeting: Meeting) -> None:
        live = LiveMeeting(meeting.id)
        self.live[meeting.id] = live
        live.runner = asyncio.create_task(self._drive(live), name=f"parley-meeting-{meeting.id}")

    # -- entry at the work-unit boundary ----------------------------------------------------------
    async def on_task_finished(self, task: Task) -> None:
        """A turn ended: members of it that await entry enter now (their boundary)."""
        if not self.live:
            # Every finished task comes here: without a meeting driven by this hub there is
            # nobody to admit (a driver admits the members no turn holds back at each turn).
            return
        for agent_id in task.members:
            if self.rooms.in_flight(agent_id):
                continue
            await self._admit(agent_id)

    # -- the driver -------------------------------------------------------------------------------
    async def _admit(self, agent_id: str) -> Meeting | None:
        """An awaiting member enters the meeting (its turn elsewhere ended, R2); the meeting as
        it stands after, or None when there was nobody to admit."""

        async def job(tx: Tx) -> Meeting | None:
            member: RoomMember | None = await tx.get("room_members", agent_id, for_update=True)
            if member is None or member.state != "awaiting-entry" or member.meeting_id is None:
                return None
            meeting: Meeting | None = await tx.get("meetings", member.meeting_id, for_update=True)
            if meeting is None or meeting.status != "running":
                return None
            attendees = [
                a.model_copy(update={"attendance": "present", "entered_round": meeting.round})
                if a.agent_id == agent_id
                else a
                for a in meeting.attendees
            ]
            await tx.update("meetings", meeting.id, attendees=[a.model_dump() for a in attendees])
            await tx.update("room_members", agent_id, state=mt.enter(member.state))
            self.ctx.events.record(
                tx,
                "meeting.entered",
                actor=agent_id,
                subject=f"meeting:{meeting.id}",
                payload={"agent_id": agent_id, "round": meeting.round, "late": True},
                trace_id=meeting.id,
            )
            entered = meeting.model_copy(update={"attendees": attendees})
            self._publish(tx, entered)
            return entered

        return await self.ctx.store.write(job)

    async def _drive(self, live: LiveMeeting) -> None:
        end: MeetingEndReason = "failed"
        error: str | None = None
        try:
            end = await self._rounds(live)
            if end in ("adjourned", "round_cap"):
                meeting, room = await self._minutes_phase(live.meeting_id, end)
                # Each accepted minutes is stored as it is accepted: a hub that dies now
                # loses none of them (recovery delivers them).
                await self.voices.write_minutes(meeting, room)
        except asyncio.CancelledError:
            end, error = "interrupted", "the hub stopped while the meeting ran"
            raise
        except Exception as exc:  # a bug or a store failure: never leave a meeting running
            log.exception("meeting %s failed", live.meeting_id)
            end, error = "failed", redact_text(f"{exc.__class__.__name__}: {exc}")
        finally:
            self.live.pop(live.meeting_id, None)
            await asyncio.shield(self._end(live.meeting_id, end, error))

    async def _minutes_phase(self, meeting_id: str, end: MeetingEndReason) -> tuple[Meeting, Room]:
        """The meeting is over and its minutes are written now: its end reason is stored while
        it still runs, so that recovery knows the minutes phase had begun."""

        async def job(tx: Tx) -> tuple[Meeting, Room]:
            await tx.update("meetings", meeting_id, end_reason=end)
            meeting: Meeting = await tx.get("meetings", meeting_id)
            return meeting, await self.rooms.require(tx, meeting.room_id)

        return await self.ctx.store.write(job)

    async def _end(self, meeting_id: str, end: MeetingEndReason, error: str | None) -> None:
        """Close the meeting; if delivering the minutes breaks the close, close it without them
        (each accepted minutes recorded as undelivered, with why): a meeting left running holds
        its members and its room for good."""
        try:
            await self._close(meeting_id, end, error)
        except Exception as exc:
            log.exception("closing meeting %s failed", meeting_id)
            reason = redact_text(f"delivering the minutes failed: {exc.__class__.__name__}: {exc}")
            with contextlib.suppress(Exception):
                await self._close(meeting_id, "failed", reason, undelivered=reason)

    async def _load(self, meeting_id: str) -> tuple[Meeting, Room, list[ChannelMessage]]:
        async with self.ctx.store.read() as tx:
            meeting: Meeting = await tx.get("meetings", meeting_id)
            room = await self.rooms.require(tx, meeting.room_id)
            window = await tx.channel_messages(meeting.channel_id, latest=TRANSCRIPT_WINDOW)
        return meeting, room, window

    async def _rounds(self, live: LiveMeeting) -> MeetingEndReason:
        counts: dict[str, int] = {}
        last: str | None = None
        # Read once: a room's settings do not change while it meets, and every turn's commit
        # gives back the meeting row and the transcript window as they stand after it.
        meeting, room, window = await self._load(live.meeting_id)
        while True:
            if live.stop.is_set() or meeting.stop_requested:
                return "stopped"
            # An awaiting member whose turn ended while nobody told us enters now.
            for a in meeting.attendees:
                if a.attendance == "awaiting" and not self.rooms.in_flight(a.agent_id):
                    meeting = await self._admit(a.agent_id) or meeting
            present = mt.present(meeting)
            # Turns given, not speeches committed: a failed speech is a turn too, or a meeting
            # whose every speech fails would never reach its cap.
            if mt.round_cap_reached(meeting.turns, len(present), meeting.max_rounds):
                return "round_cap"
            transcript = entries(window, live.rendered)
            decision, given = await self._moderate(
                live, meeting, room, window, transcript, present, counts, last
            )
            if live.stop.is_set():
                return "stopped"
            if decision.action == "adjourn":
                return "adjourned"
            assert decision.next is not None and given is not None
            meeting = given.meeting
            if given.fresh:
                # Whatever landed while the moderator decided (a human's interjection, a
                # system note) is in the next speaker's prompt: every committed post is.
                window = [*window, *given.fresh][-TRANSCRIPT_WINDOW:]
                transcript = entries(window, live.rendered)
            meeting, window = await self.voices.speak(
                live.stop, meeting, room, window, transcript, decision.next, counts, given.context
            )
            counts[decision.next] = counts.get(decision.next, 0) + 1
            last = decision.next

    async def _moderate(
        self,
        live: LiveMeeting,
        meeting: Meeting,
        room: Room,
        window: Sequence[ChannelMessage],
        transcript: tuple[TranscriptEntry, ...],
        present: list[str],
        counts: dict[str, int],
        last: str | None,
    ) -> tuple[mt.Decision, GivenTurn | None]:
        """The moderator's decision, recorded; for an invitation, in the same transaction, the
        turn's round stored on the meeting (the round every view shows), what the invited
        speaker's prompt needs, and what was posted since ``window`` was read. With no moderator
        model, rotation is the moderator: nothing failed, and nothing is recorded as failing."""
        runtime, agent = await self._moderator(meeting, room)
        roster = [a.agent_id for a in meeting.attendees]
        awaiting = [a.agent_id for a in meeting.attendees if a.attendance == "awaiting"]
        absent = [a.agent_id for a in meeting.attendees if a.attendance == "absent"]
        round_number = mt.round_of(meeting.turns, len(present))
        text: str | None = None
        failure: str | None = None
        result: TurnResult | None = None
        spent: Usage | None = None
        invocation_id = new_ulid()
        started = self.ctx.clock.monotonic()
        if runtime is None:
            decision = mt.rotation(present, counts, last)
            route = mt.ROTATION
        else:
            prompt = Prompt(
                system=mt.moderator_prompt(
                    topic=meeting.topic,
                    roster=roster,
                    present=present,
                    not_spoken=[m for m in present if counts.get(m, 0) == 0],
                    counts=counts,
                    round_number=round_number,
                    max_rounds=meeting.max_rounds,
                    awaiting=awaiting,
                    absent=absent,
                ),
                task=meeting.topic,
                transcript=transcript,
                instructions="Answer with the JSON decision only.",
            )
            turn = meeting_turn(
                self.ctx, invocation_id, agent, meeting, prompt, live.stop, round_number
            )
            try:
                result = await runtime.respond(turn)
                text, spent = result.text, result.usage
            except RuntimeFailure as exc:
                failure, spent = exc.code, exc.usage
            decision = mt.parse_decision(
                text, present=present, counts=counts, last=last, failure=failure
            )
            route = redact_text(result.model_route) if result else meeting.moderator_route
        if live.stop.is_set():
            # Stopped while the moderator decided: no decision, no turn, no round begun.
            return decision, None
        after = window[-1].seq if window else 0

        async def job(tx: Tx) -> GivenTurn | None:
            if spent is not None and agent is not None:
                # The moderator's call costs whoever's runtime answered it (failed or not).
                await self.ctx.usage.record(
                    tx,
                    call_id=invocation_id,
                    agent_id=agent.id,
                    usage=spent,
                    runtime=agent.runtime,
                    route=route,
                    channel_id=meeting.channel_id,
                    channel_kind="meeting",
                    meeting_id=meeting.id,
                )
            if runtime is not None:
                self.voices.invocation(
                    tx,
                    invocation_id,
                    meeting,
                    MODERATOR_ID,
                    round_number,
                    route,
                    "failed" if failure else "accepted",
                    decision.fallback,
                    started,
                )
            self.ctx.events.record(
                tx,
                "meeting.moderator_fallback" if decision.fallback else "meeting.moderator",
                actor=MODERATOR_ID,
                subject=f"meeting:{meeting.id}",
                payload={
                    "action": decision.action,
                    "next": decision.next,
                    "fallback": decision.fallback,
                    "model_route": route,
                    "moderator": mt.ROTATION if runtime is None else "model",
                    "scripted": route.startswith("scripted"),
                },
                trace_id=meeting.id,
            )
            if decision.next is None:
                return None
            row: Meeting | None = await tx.get("meetings", meeting.id, for_update=True)
            assert row is not None, f"meeting {meeting.id!r} is gone"
            if row.round != round_number:
                await tx.update("meetings", meeting.id, round=round_number)
                row = row.model_copy(update={"round": round_number})
                self._publish(tx, row)
            context = await self.voices.context(tx, row, room, decision.next)
            fresh = await tx.channel_messages(
                meeting.channel_id, after_seq=after, latest=TRANSCRIPT_WINDOW
            )
            return GivenTurn(row, context, fresh)

        return decision, await self.ctx.store.write(job, eager=True)

    async def _moderator(self, meeting: Meeting, room: Room) -> tuple[Runtime | None, AgentProfile]:
        """The convener's runtime, or the room's default moderator runtime for a human (or a
        remote agent, which has no model the hub can call)."""
        convener = await self.identity.get(meeting.convened_by)
        profile = AgentProfile(
            id=MODERATOR_ID, display_name="moderator", workspace=None, persona="", runtime={}
        )
        if convener is not None and moderates(convener):
            return self.runtime_for(convener), profile
        config = room.config.moderator_runtime
        if config.get("kind", "none") == "none":
            return None, profile
        return self.runtime_for_config(f"{room.id}.moderator", config), profile

    # -- the end: dismissal, minutes delivery ------------------------------------------------------
    async def _stop_note(self, tx: Tx, meeting_id: str) -> str:
        """What the transcript says of a stop: who asked for it, and whether it was this
        meeting's own stop or the emergency stop of every meeting."""
        e = tx.table("events").c
        asked = await tx.select(
            "events",
            e.subject == f"meeting:{meeting_id}",
            e.type == "meeting.stop_requested",
            order_by=[e.id.desc()],
            limit=1,
        )
        if not asked:
            return "[Meeting stopped] A stop ended it."
        who = await self.identity.get(asked[0].actor, tx)
        by = who.display_name if who is not None else asked[0].actor
        if asked[0].payload.get("emergency"):
            return f"[Meeting stopped] {by} used the emergency stop, which ends every meeting."
        return f"[Meeting stopped] {by} stopped this meeting."

    async def _close(
        self,
        meeting_id: str,
        end: MeetingEndReason,
        error: str | None,
        *,
        only_if_owner_dead: bool = False,
        undelivered: str | None = None,
    ) -> Meeting | None:
        """End a running meeting: restore its members, withdraw its pending turns, say why in
        its transcript, and (after ``adjourned`` or ``round_cap``) deliver the minutes accepted,
        record those never written as missing, and give each absentee its outcome notice.
        ``undelivered``: delivery failed once; the accepted minutes are recorded as failed."""
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> Meeting | None:
            meeting: Meeting | None = await tx.get("meetings", meeting_id, for_update=True)
            if meeting is None or meeting.status != "running":
                return None
            if (
                only_if_owner_dead
                and meeting.owner is not None
                and await self.ctx.store.is_alive(meeting.owner)
            ):
                return None
            await tx.get_channel(meeting.channel_id, for_update=True)
            await tx.update(
                "meetings", meeting_id, status="ended", end_reason=end, error=error, ended=now
            )
            await tx.update("channels", meeting.channel_id, status="closed")
            for a in meeting.attendees:
                member: RoomMember | None = await tx.get(
                    "room_members", a.agent_id, for_update=True
                )
                if member is None or member.meeting_id != meeting_id:
                    continue
                # Restore the state the summons found, for those who came late or never too.
                restored = mt.dismiss(member.state, member.state_before or a.before)
                await tx.update(
                    "room_members", a.agent_id, state=restored, state_before=None, meeting_id=None
                )
            p = tx.table("pending_turns").c
            for turn in await tx.select(
                "pending_turns", p.channel_id == meeting.channel_id, p.status == "pending"
            ):
                await tx.update("pending_turns", turn.id, status="cancelled")
            note = {
                "interrupted": "[Meeting interrupted] The hub stopped while it ran; the "
                "transcript is kept.",
                "failed": f"[Meeting failed] {error or ''}",
            }.get(end, f"[Meeting adjourned] ({end})")
            if end == "stopped":
                note = await self._stop_note(tx, meeting_id)
            await self.channels.post_as_system(tx, meeting.channel_id, note)
            if end in ("adjourned", "round_cap"):
                await self._settle_minutes(tx, meeting, end)
            elif undelivered is not None:
                n = tx.table("minutes").c
                for row in await tx.select(
                    "minutes", n.meeting_id == meeting_id, n.status == "accepted"
                ):
                    await tx.update("minutes", row.id, status="failed", reason=undelivered)
            self.ctx.events.record(
                tx,
                "meeting.ended",
                actor="system",
                subject=f"meeting:{meeting_id}",
                payload={"end_reason": end, "error": error, "speeches": meeting.speeches},
                trace_id=meeting_id,
            )
            done = meeting.model_copy(
                update={"status": "ended", "end_reason": end, "error": error, "ended": now}
            )
            self._publish(tx, done)
            return done

        return await self.ctx.store.write(job)

    async def _settle_minutes(self, tx: Tx, meeting: Meeting, end: MeetingEndReason) -> None:
        """Inside the close: every summoned member hears the outcome. Accepted minutes are
        delivered; a present member with none (the hub died before it wrote them) is recorded
        as missing, with why; a member that never entered gets the hub's outcome notice."""
        n = tx.table("minutes").c
        rows: list[Minutes] = await tx.select("minutes", n.meeting_id == meeting.id)
        by_agent = {row.agent_id: row for row in rows}
        for row in rows:
            if row.status == "accepted":
                sent = await self.voices.deliver_minutes(tx, meeting, row)
                await tx.update("minutes", row.id, status="delivered", mail_id=sent.mail_id)
        room: Room | None = await tx.get("rooms", meeting.room_id)
        limit = room.config.minutes_limit if room is not None else DEFAULT_MINUTES_LIMIT
        speeches: list[tuple[str, str]] | None = None
        humans: set[str] = set()
        for a in meeting.attendees:
            if a.agent_id in by_agent:
                continue
            if a.attendance == "present":
                tx.insert("minutes", self.voices.missing_minutes(meeting, a.agent_id))
                continue
            if speeches is None:
                messages = await tx.channel_messages(meeting.channel_id, limit=10_000)
                speeches = [
                    (m.sender_id, m.content)
                    for m in messages
                    if m.sender_kind in ("agent", "human")
                ]
                humans = {m.sender_id for m in messages if m.sender_kind == "human"}
            record = await self.voices.absentee_minutes(
                tx, meeting, a.agent_id, end, speeches, limit, humans
            )
            sent = await self.voices.deliver_minutes(tx, meeting, record)
            tx.insert("minutes", sent)

    async def wait_idle(self) -> None:
        """Wait until no meeting of this hub is being driven (tests, demo, shutdown)."""
        await runners.wait_all(self.live)

    async def stop_all(self) -> None:
        await runners.cancel_all(self.live)
