"""Meetings (R2–R9, R11): convening a room, the meeting driver, human interjections, the
emergency stop, minutes, dismissal and recovery.

A meeting's transcript is the messages of its own ``meeting`` channel: each speech is committed
there when it is spoken (R7), with its speech record, in one transaction. Every member speaks and
writes its minutes with its own runtime (R11); the moderator uses the convener's runtime and sees
only the topic, the transcript, the roster, who has not spoken and the counts (R4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta

from pydantic import BaseModel, Field

from parley.core import meetings as mt
from parley.core.channels import Channel, ChannelMessage
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import SYSTEM_ID, Principal
from parley.core.ids import new_id, new_ulid
from parley.core.limits import StorableText, check_seq, check_text
from parley.core.ports import Page, Tx
from parley.core.rooms import Attendee, Meeting, Minutes, Room, RoomMember, Speech
from parley.service.conversations.transcripts import check_content
from parley.service.meetings.driver import MeetingDriver, moderates
from parley.service.meetings.rooms import MemberView, not_a_member

log = logging.getLogger("parley.meetings")


class ConveneSpec(BaseModel):
    """A meeting to convene: its topic and, optionally, which members to summon (all by
    default; each must be a member)."""

    topic: StorableText = Field(min_length=1, max_length=2000)
    members: list[StorableText] | None = Field(default=None, max_length=200)


@dataclass(frozen=True)
class Escalation:
    """Why a seat convenes without being a member (R10): a stall a pulse found. ``triggered_by``
    ran that pulse (an agent or human through the pulse route, or None: the scheduled pulse)."""

    triggered_by: str | None


@dataclass(frozen=True)
class MeetingStatus:
    """A room's members, one of its meetings (or none) and that meeting's latest messages."""

    room_id: str
    members: list[MemberView]
    meeting: Meeting | None
    recent: list[ChannelMessage]


class Meetings(MeetingDriver):
    """Convenes, drives (:class:`~.driver.MeetingDriver`), stops and records meetings."""

    # -- convening --------------------------------------------------------------------------------
    async def convene(
        self,
        caller: Principal,
        room_id: str,
        spec: ConveneSpec,
        *,
        escalation: Escalation | None = None,
    ) -> Meeting:
        """Summon the room's members (R2): a working one awaits entry at its next turn end, an
        idle or done one enters at once. Refused, with nobody left half-summoned, for a
        non-member, a non-member summoned, a meeting already running, or nobody able to enter.
        With ``escalation`` the caller is the seat a pulse escalated to; the transcript and the
        event name both the seat and who ran the pulse."""

        async def job(tx: Tx) -> Meeting:
            # The room's row lock makes convening one at a time per room, on every hub sharing
            # the store: two convenes must not both find no meeting running.
            room = await self.rooms.require(tx, room_id, for_update=True)
            if caller.kind == "agent":
                own: RoomMember | None = await tx.get("room_members", caller.id)
                if own is None or own.room_id != room_id:
                    raise not_a_member(caller.id, room_id, "convene its meetings")
            me = tx.table("meetings").c
            running = await tx.select(
                "meetings", me.room_id == room_id, me.status == "running", limit=1
            )
            if running:
                raise Conflict(
                    f"meeting {running[0].id!r} is already running in room {room_id!r}; wait for "
                    "it to end or stop it",
                    code="meeting_already_running",
                )
            await self._check_interval(tx, caller, room, escalation)
            rows = await self.rooms.member_rows(tx, room_id)
            by_id = {row.agent_id: row for row in rows}
            wanted = list(by_id) if spec.members is None else list(dict.fromkeys(spec.members))
            strangers = [m for m in wanted if m not in by_id]
            if strangers:
                raise PermissionDenied(
                    f"{strangers!r} are not members of room {room_id!r} and cannot be summoned; "
                    "only members attend a room's meetings",
                    code="summon_non_member",
                )
            if not wanted:
                raise Conflict(f"room {room_id!r} has no members to summon", code="room_empty")
            attendees: list[Attendee] = []
            for agent_id in wanted:
                row = by_id[agent_id]
                before = mt.activity(in_flight=self.rooms.in_flight(agent_id), recorded=row.state)
                state = mt.summon(before)
                if state == "awaiting-entry" and room.config.entry_boundary == "immediate":
                    state = mt.enter(state)
                attendees.append(
                    Attendee(
                        agent_id=agent_id,
                        before=before,
                        attendance="present" if state == "in-meeting" else "awaiting",
                        entered_round=1 if state == "in-meeting" else None,
                    )
                )
            if not any(a.attendance == "present" for a in attendees):
                raise Conflict(
                    f"nobody in room {room_id!r} can enter now: {wanted!r} all have a turn in "
                    "flight; convene again when one of them is idle",
                    code="nobody_can_enter",
                )
            now = self.ctx.clock.now()
            meeting_id = new_id("mtg-")
            channel = Channel(
                id=new_ulid(),
                name=f"meeting: {spec.topic[:60]}",
                kind="meeting",
                private=True,
                created_by=caller.id,
                created=now,
                turn_timeout_s=self.ctx.settings.turn_timeout_s,
                discussion_rounds=1,
                metadata={"room_id": room_id, "meeting_id": meeting_id},
            )
            tx.insert("channels", channel)
            await tx.flush()
            members = [a.agent_id for a in attendees]
            if caller.id not in members:
                members.append(caller.id)
            await tx.set_members(channel.id, members)
            convener_runtime = self._moderator_runtime_label(caller, room)
            meeting = Meeting(
                id=meeting_id,
                room_id=room_id,
                channel_id=channel.id,
                topic=spec.topic,
                convened_by=caller.id,
                moderator_route=convener_runtime,
                round=1,
                max_rounds=room.config.max_rounds,
                attendees=attendees,
                owner=self.hub_id,
                created=now,
            )
            tx.insert("meetings", meeting)
            for a in attendees:
                state = "in-meeting" if a.attendance == "present" else "awaiting-entry"
                await tx.update(
                    "room_members",
                    a.agent_id,
                    state=state,
                    state_before=a.before,
                    meeting_id=meeting_id,
                )
            await self.channels.post_as_moderator(
                tx,
                channel.id,
                mt.convened_note(
                    caller.id,
                    spec.topic,
                    escalated=escalation is not None,
                    triggered_by=escalation.triggered_by if escalation else None,
                ),
            )
            actor, record = caller.id, {}
            if escalation is not None:
                # Whoever ran the pulse acted (the hub itself for the scheduled one); the seat
                # is whom the meeting was convened as.
                actor = escalation.triggered_by or SYSTEM_ID
                record = {"seat": caller.id, "triggered_by": escalation.triggered_by}
            self.ctx.events.record(
                tx,
                "meeting.convened",
                actor=actor,
                subject=f"meeting:{meeting_id}",
                payload={
                    "room_id": room_id,
                    "channel_id": channel.id,
                    "present": [a.agent_id for a in attendees if a.attendance == "present"],
                    "awaiting": [a.agent_id for a in attendees if a.attendance == "awaiting"],
                    "moderator": convener_runtime,
                    **record,
                },
                trace_id=meeting_id,
            )
            self._publish(tx, meeting)
            tx.after_commit(lambda: self.launch(meeting))
            return meeting

        return await self.ctx.store.write(job)

    async def _check_interval(
        self, tx: Tx, caller: Principal, room: Room, escalation: Escalation | None
    ) -> None:
        """The room's throttle (``min_meeting_interval_s``): an agent convenes at most once per
        interval after the room's last meeting ended. A stall a pulse escalates bypasses it
        (stuck right after a meeting is exactly when help is needed), and so do humans and the
        operator: a person deciding to meet is not a loop to be throttled."""
        if caller.kind != "agent" or escalation is not None:
            return
        me = tx.table("meetings").c
        found: list[Meeting] = await tx.select(
            "meetings", me.room_id == room.id, order_by=[me.id.desc()], limit=1
        )
        if not found:
            return
        last = found[0].ended or found[0].created
        interval = timedelta(seconds=room.config.min_meeting_interval_s)
        now = self.ctx.clock.now()
        allowed, _ = mt.may_convene(now, last, min_interval=interval, stalled=False)
        if not allowed:
            wait = (last + interval - now).total_seconds()
            raise Conflict(
                f"room {room.id!r} met {int((now - last).total_seconds())}s ago; an agent may "
                f"convene it again after {room.config.min_meeting_interval_s:g}s "
                f"(min_meeting_interval_s), in {wait:.0f}s. A stall the pulse finds bypasses "
                "this; a human may convene at any time",
                code="meeting_throttled",
                retry_after=round(max(wait, 0.001), 3),
            )

    def _moderator_runtime_label(self, convener: Principal, room: Room) -> str:
        if moderates(convener):
            return f"convener:{convener.id}:{convener.runtime_kind}"
        kind = room.config.moderator_runtime.get("kind", "none")
        return mt.ROTATION if kind == "none" else f"room:{kind}"

    # -- humans, stop, queries, recovery ----------------------------------------------------------
    async def post(self, caller: Principal, meeting_id: str, content: str) -> ChannelMessage:
        """A human speaks into a running meeting without taking a turn (R6); the next speaker
        sees it in its transcript."""
        if caller.kind != "human":
            raise PermissionDenied(
                f"{caller.id!r} is an agent; agents speak in a meeting when the moderator gives "
                "them the floor",
                code="meeting_post_humans_only",
            )
        size = check_content(content, "message content", self.ctx.settings.message_max_bytes)
        if not content.strip():
            raise InvalidRequest("message content is empty", code="empty_message")
        ticket = self.ctx.quotas.ticket(caller)
        ticket.charge(messages=1, nbytes=size)

        async def job(tx: Tx) -> ChannelMessage:
            meeting: Meeting | None = await tx.get("meetings", meeting_id)
            if meeting is None:
                raise NotFound(f"no meeting {meeting_id!r}", code="meeting_not_found")
            if meeting.status != "running":
                raise Conflict(
                    f"meeting {meeting_id!r} has ended ({meeting.end_reason}); it takes no more "
                    "messages",
                    code="meeting_ended",
                )
            if meeting.end_reason is not None:
                # Its minutes phase: the speeches are over and the minutes are being written
                # from them, so a post now would reach no member.
                raise Conflict(
                    f"meeting {meeting_id!r} is over ({meeting.end_reason}) and its members are "
                    "writing their minutes; a post would reach none of them, so mail them "
                    "instead",
                    code="meeting_ended",
                )
            members = await tx.channel_members(meeting.channel_id)
            if caller.id not in members:
                await tx.set_members(meeting.channel_id, [*members, caller.id])
            return await self.channels.append(
                tx, meeting.channel_id, sender_id=caller.id, sender_kind="human", content=content
            )

        try:
            return await self.ctx.store.write(job)
        except Exception:
            ticket.refund()
            raise

    async def stop(self, caller: Principal) -> list[Meeting]:
        """Emergency stop (R9): no room id; stops every running meeting the caller may stop (the
        operator and humans: all; an agent: its room's), and returns them once they have
        actually ended: a stop that only says "ok" while the meeting goes on is worse than none."""

        async def job(tx: Tx) -> list[str]:
            me = tx.table("meetings").c
            where = [me.status == "running"]
            if caller.kind == "agent":
                member: RoomMember | None = await tx.get("room_members", caller.id)
                if member is None:
                    return []
                where.append(me.room_id == member.room_id)
            running: list[Meeting] = await tx.select("meetings", *where)
            for m in running:
                await self._request_stop(tx, caller, m, emergency=True)
            return [m.id for m in running]

        return await self._wait_stopped(await self.ctx.store.write(job))

    async def stop_meeting(self, caller: Principal, meeting_id: str) -> Meeting:
        """Stop one meeting (the one a person is looking at), not every meeting of the hub: by
        anyone who may read it (an agent: its own room's). Returns it once it has ended."""

        async def job(tx: Tx) -> list[str]:
            meeting = await self._visible(tx, caller, meeting_id)
            if meeting.status != "running":
                raise Conflict(
                    f"meeting {meeting_id!r} has already ended ({meeting.end_reason})",
                    code="meeting_ended",
                )
            await self._request_stop(tx, caller, meeting, emergency=False)
            return [meeting.id]

        [stopped] = await self._wait_stopped(await self.ctx.store.write(job))
        return stopped

    async def _request_stop(
        self, tx: Tx, caller: Principal, meeting: Meeting, *, emergency: bool
    ) -> None:
        await tx.update("meetings", meeting.id, stop_requested=True)
        self.ctx.events.record(
            tx,
            "meeting.stop_requested",
            actor=caller.id,
            subject=f"meeting:{meeting.id}",
            payload={"emergency": emergency},
            trace_id=meeting.id,
        )

    async def _wait_stopped(self, ids: list[str]) -> list[Meeting]:
        """Signal this hub's drivers of the meetings stopped and wait for them to end; another
        hub's driver sees the stored request at its next turn."""
        for meeting_id in ids:
            live = self.live.get(meeting_id)
            if live is None:
                continue
            live.stop.set()
            if live.runner is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(live.runner)
        async with self.ctx.store.read() as tx:
            return [await tx.get("meetings", meeting_id) for meeting_id in ids]

    async def _visible(self, tx: Tx, caller: Principal, meeting_id: str) -> Meeting:
        """A meeting the caller may read: any, for humans and the operator (a deleted room's
        too: its meetings stay on the record), its own room's for an agent."""
        meeting: Meeting | None = await tx.get("meetings", meeting_id)
        if meeting is None:
            raise NotFound(f"no meeting {meeting_id!r}", code="meeting_not_found")
        if caller.kind == "agent":
            await self.rooms.check_visible(tx, caller, meeting.room_id)
        return meeting

    async def get(self, caller: Principal, meeting_id: str) -> Meeting:
        async with self.ctx.store.read() as tx:
            return await self._visible(tx, caller, meeting_id)

    async def of_room(
        self, caller: Principal, room_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[Meeting]:
        """The rows of ``of_room_page``."""
        return (await self.of_room_page(caller, room_id, after=after, limit=limit)).rows

    async def of_room_page(
        self, caller: Principal, room_id: str, *, after: str | None = None, limit: int = 100
    ) -> Page[Meeting]:
        """A room's meetings, oldest first after the meeting ``after``: at most ``limit``, and
        no more once they hold the hub's page budget in bytes."""
        if after is not None:
            check_text(after, "after")
        async with self.ctx.store.read() as tx:
            await self.rooms.check_visible(tx, caller, room_id)
            me = tx.table("meetings").c
            where = [me.room_id == room_id]
            if after is not None:
                where.append(me.id > after)
            return await tx.page(
                "meetings",
                *where,
                key="id",
                limit=limit,
                max_bytes=self.ctx.settings.page_max_bytes,
            )

    async def latest(self, caller: Principal, n: int) -> list[Meeting]:
        """The caller's ``n`` most recent meetings, running ones first: its own room's for an
        agent, every room's for humans and the operator."""
        async with self.ctx.store.read() as tx:
            me = tx.table("meetings").c
            where = []
            if caller.kind == "agent":
                member: RoomMember | None = await tx.get("room_members", caller.id)
                if member is None:
                    return []
                where.append(me.room_id == member.room_id)
            # Ids are time-ordered: running meetings first, then the newest.
            return await tx.select(
                "meetings",
                *where,
                order_by=[(me.status == "running").desc(), me.id.desc()],
                limit=n,
            )

    async def status(
        self, caller: Principal, *, room_id: str | None, meeting_id: str | None, recent: int
    ) -> MeetingStatus:
        """The meeting named, else the room's running (or latest) one, with the room's members
        and the meeting's ``recent`` newest messages, in one read."""
        async with self.ctx.store.read() as tx:
            meeting: Meeting | None
            if meeting_id is not None:
                meeting = await self._visible(tx, caller, meeting_id)
                room_id = meeting.room_id
            else:
                assert room_id is not None, "a meeting id or a room id"
                await self.rooms.check_visible(tx, caller, room_id)
                me = tx.table("meetings").c
                # Ids are time-ordered: a running meeting first, else the latest.
                found: list[Meeting] = await tx.select(
                    "meetings",
                    me.room_id == room_id,
                    order_by=[(me.status == "running").desc(), me.id.desc()],
                    limit=1,
                )
                meeting = found[0] if found else None
            members = [self.rooms.view(row) for row in await self.rooms.member_rows(tx, room_id)]
            messages: list[ChannelMessage] = []
            if meeting is not None and recent:
                page = await tx.channel_page(
                    meeting.channel_id, latest=recent, max_bytes=self.ctx.settings.page_max_bytes
                )
                messages = page.rows
        return MeetingStatus(room_id, members, meeting, messages)

    async def transcript(
        self,
        caller: Principal,
        meeting_id: str,
        *,
        after_seq: int | None = None,
        latest: int | None = None,
        limit: int = 500,
    ) -> Page[ChannelMessage]:
        """The meeting's messages in order, a page at a time as a channel's are: at most
        ``limit`` after ``after_seq`` (or the ``latest`` ones), within the hub's page budget."""
        check_seq(after_seq, "after_seq")
        async with self.ctx.store.read() as tx:
            meeting = await self._visible(tx, caller, meeting_id)
            return await tx.channel_page(
                meeting.channel_id,
                after_seq=after_seq,
                latest=latest,
                limit=limit,
                max_bytes=self.ctx.settings.page_max_bytes,
            )

    async def speeches(self, caller: Principal, meeting_id: str) -> list[Speech]:
        await self.get(caller, meeting_id)
        async with self.ctx.store.read() as tx:
            s = tx.table("speeches").c
            return await tx.select("speeches", s.meeting_id == meeting_id, order_by=[s.id])

    async def minutes(self, caller: Principal, meeting_id: str) -> list[Minutes]:
        """Minutes of a meeting: an agent sees only its own, humans and the operator all."""
        await self.get(caller, meeting_id)
        async with self.ctx.store.read() as tx:
            n = tx.table("minutes").c
            rows: list[Minutes] = await tx.select(
                "minutes", n.meeting_id == meeting_id, order_by=[n.agent_id]
            )
        if caller.kind == "agent":
            rows = [r for r in rows if r.agent_id == caller.id]
        return rows

    async def recover(self) -> list[Meeting]:
        """On start and on every lease sweep: a meeting left running by a hub that is gone is
        closed as interrupted, its transcript kept and its members restored (R7)."""
        async with self.ctx.store.read() as tx:
            me = tx.table("meetings").c
            running: list[Meeting] = await tx.select("meetings", me.status == "running")
        # Look without locks first, asking about each owner once: the sweep runs every few
        # seconds, and most of the time every meeting's hub is alive (this one, often).
        alive: dict[str, bool] = {self.hub_id: True}
        out = []
        for meeting in running:
            owner = meeting.owner
            if owner is not None:
                if owner not in alive:
                    alive[owner] = await self.ctx.store.is_alive(owner)
                if alive[owner]:
                    continue
            if meeting.end_reason in ("adjourned", "round_cap"):
                # It had ended and its minutes were being written: it ends as it ended, the
                # minutes accepted are delivered, those never written recorded as missing.
                closed = await self._close(
                    meeting.id,
                    meeting.end_reason,
                    "the hub driving it stopped while the minutes were written; minutes not "
                    "written by then are recorded as missing",
                    only_if_owner_dead=True,
                )
            else:
                closed = await self._close(
                    meeting.id,
                    "interrupted",
                    "the hub driving it stopped while the meeting ran",
                    only_if_owner_dead=True,
                )
            if closed is not None:
                out.append(closed)
        return out
