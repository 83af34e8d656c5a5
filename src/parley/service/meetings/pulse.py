"""The light path of rooms (R10): ``pulse(room)`` runs the briefing tick once, evaluates the stall
triggers once, and escalates a stall to a meeting convened by the human seat. The stall is
computed from what the hub observed, never from what members say of themselves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from parley.core import meetings as mt
from parley.core.channels import ChannelMessage
from parley.core.errors import ParleyError
from parley.core.identity import OPERATOR_ID, SYSTEM_ID, Principal
from parley.core.ids import new_ulid
from parley.core.limits import check_text
from parley.core.ports import Page, Tx
from parley.core.rooms import Brief, Meeting, PulseEntry, Room, RoomMember
from parley.service.context import ServiceContext
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail
from parley.service.meetings.meetings import ConveneSpec, Escalation, Meetings
from parley.service.meetings.rooms import Rooms

log = logging.getLogger("parley.pulse")

OBSERVED_MESSAGES = 20


@dataclass
class PulseResult:
    """One pulse: the board summary, the signals, and whether (and why not) it escalated."""

    room_id: str
    summary: str
    signals: list[dict[str, str | None]]
    conclusion: str
    escalated: bool
    reason: str
    meeting_id: str | None = None
    logged: bool = False
    broadcast_to: list[str] = field(default_factory=list)


class Pulse:
    """Runs the light tick and the stall escalation of rooms."""

    def __init__(
        self, ctx: ServiceContext, identity: Identity, mail: Mail, rooms: Rooms, meetings: Meetings
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.mail = mail
        self.rooms = rooms
        self.meetings = meetings
        self._broadcast: dict[str, str] = {}  # room id -> the last summary broadcast

    async def pulse(
        self, caller: Principal, room_id: str, *, scheduled: bool = False
    ) -> PulseResult:
        """Run once: broadcast the board summary if it changed (no model call), evaluate the
        triggers once, escalate a stall; failure to escalate is a reason, never an exception.
        ``scheduled``: the hub's own pulse (``PARLEY_ROOM_PULSE_S``), not the caller's."""
        triggered_by = None if scheduled else caller.id
        async with self.ctx.store.read() as tx:
            room = await self.rooms.check_visible(tx, caller, room_id)
            members = await self.rooms.member_rows(tx, room_id)
            observations, last_progress, briefs = await self._observe(tx, room, members)
            last_meeting = await self._last_meeting(tx, room_id)
            last_log = await self._last_log(tx, room_id)
        summary = self.rooms.board_summary(briefs)
        result = PulseResult(room_id, summary, [], "ok", False, "no stall")
        if summary and self._broadcast.get(room_id) != summary:
            result.broadcast_to = await self._broadcast_board(room, members, summary)
        now = self.ctx.clock.now()
        signals = mt.detect_stall(
            now,
            observations,
            last_progress=last_progress,
            silent_after=timedelta(seconds=room.config.silent_after_s),
            brief_stale_after=timedelta(seconds=room.config.brief_stale_after_s),
            no_progress_after=timedelta(seconds=room.config.no_progress_after_s),
            repeat_window=room.config.repeat_window,
        )
        result.signals = [s.as_dict() for s in signals]
        result.conclusion = mt.pulse_conclusion(signals)
        if signals:
            # A stall bypasses the room's throttle of convening, and the result says so when
            # the throttle would have held (stuck right after a meeting is when help is needed).
            interval = timedelta(seconds=room.config.min_meeting_interval_s)
            allowed, _ = mt.may_convene(now, last_meeting, min_interval=interval, stalled=False)
            why = "stall" if allowed else "stall, bypassing min_meeting_interval_s"
            result.escalated, result.reason, result.meeting_id = await self._escalate(
                room, result.conclusion, why, triggered_by
            )
        if last_log is None or (last_log.conclusion, last_log.reason) != (
            result.conclusion,
            result.reason,
        ):
            await self._log(result, triggered_by)
            result.logged = True
        return result

    async def _observe(
        self, tx: Tx, room: Room, members: list[RoomMember]
    ) -> tuple[list[mt.MemberObservation], datetime | None, list[Brief]]:
        b = tx.table("briefs").c
        briefs: list[Brief] = await tx.select(
            "briefs", b.room_id == room.id, order_by=[b.created, b.id]
        )
        progress: list[datetime] = [m.joined for m in members]
        progress += [brief.created for brief in briefs]
        out = []
        for member in members:
            agent: Principal | None = await tx.get("principals", member.agent_id)
            own: list[ChannelMessage] = []
            if agent is not None and agent.work_channel_id is not None:
                recent = await tx.channel_messages(agent.work_channel_id, latest=OBSERVED_MESSAGES)
                own = [m for m in recent if m.sender_id == member.agent_id]
            mine = [brief for brief in briefs if brief.agent_id == member.agent_id]
            outputs = sorted(
                [(m.created, m.content) for m in own] + [(x.created, x.text) for x in mine]
            )
            times = [t for t, _ in outputs]
            if member.last_activity is not None:
                times.append(member.last_activity)
            progress += times
            out.append(
                mt.MemberObservation(
                    member.agent_id,
                    max(times) if times else None,
                    mine[-1].created if mine else None,
                    tuple(mt.fingerprint(text) for _, text in outputs),
                )
            )
        if members:
            m = tx.table("messages").c
            mail = await tx.select(
                "messages",
                m.recipient_id.in_([x.agent_id for x in members]),
                order_by=[m.created.desc()],
                limit=1,
            )
            progress += [msg.created for msg in mail]
        return out, (max(progress) if progress else None), briefs

    async def _last_meeting(self, tx: Tx, room_id: str) -> datetime | None:
        me = tx.table("meetings").c
        rows: list[Meeting] = await tx.select(
            "meetings", me.room_id == room_id, order_by=[me.created.desc()], limit=1
        )
        return rows[0].created if rows else None

    async def _last_log(self, tx: Tx, room_id: str) -> PulseEntry | None:
        p = tx.table("pulse_log").c
        rows: list[PulseEntry] = await tx.select(
            "pulse_log", p.room_id == room_id, order_by=[p.id.desc()], limit=1
        )
        return rows[0] if rows else None

    async def _broadcast_board(
        self, room: Room, members: list[RoomMember], summary: str
    ) -> list[str]:
        async def job(tx: Tx) -> list[str]:
            for member in members:
                await self.mail.deliver_system(
                    tx,
                    member.agent_id,
                    "notice",
                    f"Briefing board of room {room.name!r}",
                    summary,
                    {"room_id": room.id},
                )
            return [m.agent_id for m in members]

        sent = await self.ctx.store.write(job)
        self._broadcast[room.id] = summary
        return sent

    async def _escalate(
        self, room: Room, conclusion: str, why: str, triggered_by: str | None
    ) -> tuple[bool, str, str | None]:
        """Convene as the human seat (the stall is an outside intervention: borrowing a member's
        identity would give the moderator its model and the record the wrong convener). The
        record names the seat and who ran the pulse, so an agent's pulse is never recorded as
        the operator's act."""
        try:
            seat = await self.identity.require(OPERATOR_ID)
            meeting = await self.meetings.convene(
                seat,
                room.id,
                ConveneSpec(topic=f"Stall in room {room.name}: {conclusion}"[:2000]),
                escalation=Escalation(triggered_by),
            )
        except ParleyError as exc:
            return False, f"not escalated: {exc.code}: {exc.message}", None
        return True, f"escalated ({why})", meeting.id

    async def _log(self, result: PulseResult, triggered_by: str | None) -> None:
        entry = PulseEntry(
            id=new_ulid(),
            room_id=result.room_id,
            conclusion=result.conclusion,
            escalated=result.escalated,
            reason=result.reason,
            signals=list(result.signals),
            meeting_id=result.meeting_id,
            created=self.ctx.clock.now(),
        )

        async def job(tx: Tx) -> None:
            tx.insert("pulse_log", entry)
            self.ctx.events.record(
                tx,
                "room.pulse",
                actor=triggered_by or SYSTEM_ID,
                subject=f"room:{result.room_id}",
                payload={
                    "conclusion": result.conclusion,
                    "escalated": result.escalated,
                    "reason": result.reason,
                    "meeting_id": result.meeting_id,
                },
            )

        await self.ctx.store.write(job)

    async def pulse_all(self) -> None:
        """The scheduled pulse of every room (``PARLEY_ROOM_PULSE_S``)."""
        seat = await self.identity.require(OPERATOR_ID)
        async with self.ctx.store.read() as tx:
            r = tx.table("rooms").c
            rooms: list[Room] = await tx.select("rooms", order_by=[r.id])
        for room in rooms:
            try:
                await self.pulse(seat, room.id, scheduled=True)
            except Exception:
                log.exception("pulse of room %s failed", room.id)

    async def log(
        self, caller: Principal, room_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[PulseEntry]:
        """The rows of ``log_page``."""
        return (await self.log_page(caller, room_id, after=after, limit=limit)).rows

    async def log_page(
        self, caller: Principal, room_id: str, *, after: str | None = None, limit: int = 100
    ) -> Page[PulseEntry]:
        """A room's pulse log, oldest first after the entry ``after``: at most ``limit``, and no
        more once they hold the hub's page budget in bytes."""
        if after is not None:
            check_text(after, "after")
        async with self.ctx.store.read() as tx:
            await self.rooms.check_visible(tx, caller, room_id)
            p = tx.table("pulse_log").c
            where = [p.room_id == room_id]
            if after is not None:
                where.append(p.id > after)
            return await tx.page(
                "pulse_log",
                *where,
                key="id",
                limit=limit,
                max_bytes=self.ctx.settings.page_max_bytes,
            )
