"""Meeting rooms and their membership (R1), members' observed activity (R2) and the briefing
board (R10). Membership is the permission boundary: only members convene, only members are
summoned, and joining is the member's own act (or the operator's), which is its consent to be
summoned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from parley.core import meetings as mt
from parley.core import names
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import OPERATOR_ID, Principal
from parley.core.ids import new_id
from parley.core.limits import StorableText, check_text
from parley.core.ports import Page, Tx
from parley.core.rooms import MEETING_STATES, Brief, MemberState, Room, RoomConfig, RoomMember
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.identity import Identity

ROOM_ID_PREFIX = "room-"


class RoomSpec(BaseModel):
    """A new room."""

    name: StorableText = Field(min_length=1, max_length=200)
    config: RoomConfig = Field(default_factory=RoomConfig)


@dataclass(frozen=True)
class MemberView:
    """A member as others see it: who, which session, which workspace, and its state now."""

    agent_id: str
    room_id: str
    session_id: str
    workspace: str | None
    state: MemberState
    meeting_id: str | None


def not_a_member(agent_id: str, room_id: str, action: str) -> PermissionDenied:
    return PermissionDenied(
        f"{agent_id!r} is not a member of room {room_id!r} and may not {action}; join the room "
        "first",
        code="not_a_room_member",
    )


def _refuse_in_meeting(member: RoomMember, action: str) -> None:
    if member.state in MEETING_STATES:
        raise Conflict(
            f"{member.agent_id!r} is in a meeting of room {member.room_id!r}; it can {action} "
            "only after the meeting ends",
            code="member_in_meeting",
        )


class Rooms:
    """Rooms, members and briefs."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        channels: Channels,
        in_flight: Callable[[str], bool],
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.channels = channels
        # Whether an agent has a turn in flight in this hub: the hub's own observation of
        # "working", never the agent's say-so.
        self.in_flight = in_flight

    def _refuse_working(self, agent_id: str, action: str) -> None:
        """Joining or leaving changes what a running agent is told: only between its turns."""
        if self.in_flight(agent_id):
            raise Conflict(
                f"{agent_id!r} has a turn in flight; it can {action} only while not working, so "
                "try again when its turn has ended",
                code="member_busy",
            )

    # -- rooms ------------------------------------------------------------------------------------
    async def create(self, caller: Principal, spec: RoomSpec) -> Room:
        if spec.config.moderator_runtime.get("kind", "none") != "none" and not caller.is_operator:
            raise PermissionDenied(
                "only the operator may give a room a moderator runtime: its calls are paid by "
                "the hub; leave moderator_runtime out to moderate by safe rotation",
                code="operator_only",
            )
        room = Room(
            id=new_id(ROOM_ID_PREFIX),
            name=spec.name,
            created_by=caller.id,
            created=self.ctx.clock.now(),
            config=spec.config,
        )

        async def job(tx: Tx) -> Room:
            await self._check_limit(tx, caller)
            # Under the operator's row lock, so two hubs cannot both take one name.
            await tx.get("principals", OPERATOR_ID, for_update=True)
            r = tx.table("rooms").c
            taken = await tx.select("rooms", r.name == room.name, limit=1)
            if taken:
                raise names.name_taken(room.name, "room", taken[0].id)
            tx.insert("rooms", room)
            self.ctx.events.record(
                tx,
                "room.created",
                actor=caller.id,
                subject=f"room:{room.id}",
                payload={"name": room.name},
            )
            return room

        return await self.ctx.store.write(job)

    async def _check_limit(self, tx: Tx, caller: Principal) -> None:
        """Refuse a room more than the caller may have (``rooms_per_principal``). The operator
        is not limited: it runs the hub, sets rooms up for everyone and may delete any room."""
        limit = self.ctx.settings.rooms_per_principal
        if caller.is_operator or limit == 0:
            return
        # The creator's row lock: two creations of one principal (on two connections, or two
        # hubs) must not both find room for one more.
        await tx.get("principals", caller.id, for_update=True)
        r = tx.table("rooms").c
        created = await tx.count("rooms", r.created_by == caller.id)
        if created >= limit:
            raise Conflict(
                f"{caller.id!r} already has {created} rooms it created, the most one principal "
                f"may have ({limit}); delete one it no longer uses (`parley room delete <id>`, "
                "REST: DELETE /v1/rooms/{id}) and try again",
                code="room_limit_reached",
                limit=limit,
            )

    async def require(self, tx: Tx, room_id: str, *, for_update: bool = False) -> Room:
        room: Room | None = await tx.get("rooms", room_id, for_update=for_update)
        if room is None:
            raise NotFound(f"no room {room_id!r}", code="room_not_found")
        return room

    async def _to_join(self, tx: Tx, ref: str) -> Room:
        """The room an agent joins, locked: by its id, or by its exact name (room names are
        unique). An agent sees no room before it joins one, so no other lookup by name (nor
        by id prefix) can find it one to join."""
        room: Room | None = await tx.get("rooms", ref, for_update=True)
        if room is None:
            r = tx.table("rooms").c
            named: list[Room] = await tx.select("rooms", r.name == ref.strip(), limit=2)
            if len(named) == 1:
                room = await tx.get("rooms", named[0].id, for_update=True)
        if room is None:
            raise NotFound(f"no room {ref!r} (by id or name)", code="room_not_found")
        return room

    async def check_visible(self, tx: Tx, caller: Principal, room_id: str) -> Room:
        """A room whose records (members, meetings, board, pulse) the caller may read: humans
        and the operator every room's, an agent only its own room's."""
        room = await self.require(tx, room_id)
        if caller.kind == "agent":
            member: RoomMember | None = await tx.get("room_members", caller.id)
            if member is None or member.room_id != room_id:
                raise not_a_member(caller.id, room_id, "see it")
        return room

    async def resolve(self, caller: Principal, ref: str) -> str | None:
        """The id of the room ``ref`` addresses for the caller: its id, its name, or the start
        of its id (``room-`` may be left out), among the rooms the caller sees; refused when
        several fit."""
        ref = ref.strip()
        async with self.ctx.store.read() as tx:
            if await tx.get("rooms", ref) is not None:
                return ref
            rooms = tx.table("rooms")
            r = rooms.c
            seen: list[Any] = []
            if caller.kind == "agent":
                # Only rooms the agent sees are looked at: others' do not crowd its own out.
                members = rooms.metadata.tables["room_members"]
                own = members.select().with_only_columns(members.c.room_id)
                seen.append(
                    (r.created_by == caller.id) | r.id.in_(own.where(members.c.id == caller.id))
                )
            named: list[Room] = await tx.select(
                "rooms", r.name == ref, *seen, order_by=[r.id], limit=50
            )
            prefixed: list[Room] = []
            if len(ref) >= names.MIN_PREFIX:
                key = names.id_key(ref, ROOM_ID_PREFIX)
                starts = r.id.startswith(ref, autoescape=True) | r.id.startswith(
                    key, autoescape=True
                )
                prefixed = await tx.select("rooms", starts, *seen, order_by=[r.id], limit=50)
            visible = {
                room.id for room in [*named, *prefixed] if await self._sees(tx, caller, room)
            }
        return names.choose(
            ref,
            "room",
            [names.Named(x.id, x.name) for x in named if x.id in visible],
            [names.Named(x.id, x.name) for x in prefixed if x.id in visible],
        )

    async def _sees(self, tx: Tx, caller: Principal, room: Room) -> bool:
        """Whether the caller sees the room at all (as ``get`` decides)."""
        if caller.kind != "agent" or room.created_by == caller.id:
            return True
        member: RoomMember | None = await tx.get("room_members", caller.id)
        return member is not None and member.room_id == room.id

    async def get(self, caller: Principal, room_id: str) -> Room:
        """A room itself: an agent sees its own room and the rooms it created (to delete what
        it no longer uses), but reads only its own room's records."""
        async with self.ctx.store.read() as tx:
            room = await self.require(tx, room_id)
            if caller.kind == "agent" and room.created_by != caller.id:
                await self.check_visible(tx, caller, room_id)
            return room

    async def visible(
        self, caller: Principal, *, after: str | None = None, limit: int = 100
    ) -> list[Room]:
        """The rows of ``page``."""
        return (await self.page(caller, after=after, limit=limit)).rows

    async def page(
        self, caller: Principal, *, after: str | None = None, limit: int = 100
    ) -> Page[Room]:
        """Rooms the caller sees, in id order after ``after``: every room for humans and the
        operator, its own room and those it created for an agent. At most ``limit``, and no
        more once they hold the hub's page budget in bytes."""
        if after is not None:
            check_text(after, "after")
        async with self.ctx.store.read() as tx:
            r = tx.table("rooms").c
            where = [] if after is None else [r.id > after]
            if caller.kind == "agent":
                member: RoomMember | None = await tx.get("room_members", caller.id)
                mine = r.created_by == caller.id
                where.append(mine if member is None else mine | (r.id == member.room_id))
            return await tx.page(
                "rooms", *where, key="id", limit=limit, max_bytes=self.ctx.settings.page_max_bytes
            )

    async def room_of(self, caller: Principal) -> Room | None:
        """The room the caller is a member of, if any (an agent belongs to at most one)."""
        async with self.ctx.store.read() as tx:
            member: RoomMember | None = await tx.get("room_members", caller.id)
            if member is None:
                return None
            found: Room | None = await tx.get("rooms", member.room_id)
            return found

    async def delete(self, caller: Principal, room_id: str) -> Room:
        """Delete an empty room, by its creator or the operator. Its meetings, their transcripts,
        speeches and minutes and its pulse log stay for the record (humans and the operator
        still read a meeting by its id); its board goes with it. Refused while members remain:
        they leave first (the operator may remove them), which also means no meeting runs."""

        async def job(tx: Tx) -> Room:
            # The row lock orders this against a join, which takes it too: no member can join
            # a room that is being deleted.
            room = await self.require(tx, room_id, for_update=True)
            if caller.kind == "agent" and room.created_by != caller.id:
                await self.check_visible(tx, caller, room_id)
            if not (caller.is_operator or caller.id == room.created_by):
                raise PermissionDenied(
                    f"only the room's creator {room.created_by!r} or the operator may delete "
                    f"room {room_id!r}",
                    code="room_owner_only",
                )
            members = await self.member_rows(tx, room_id)
            if members:
                names = [m.agent_id for m in members]
                raise Conflict(
                    f"room {room_id!r} still has members {names!r}; a room is deleted empty, so "
                    "they leave it first (the operator may remove them)",
                    code="room_not_empty",
                    members=names,
                )
            b = tx.table("briefs").c
            for brief in await tx.select("briefs", b.room_id == room_id):
                await tx.delete("briefs", brief.id)
            await tx.delete("rooms", room_id)
            self.ctx.events.record(
                tx,
                "room.deleted",
                actor=caller.id,
                subject=f"room:{room_id}",
                payload={"name": room.name},
            )
            return room

        return await self.ctx.store.write(job)

    # -- members ----------------------------------------------------------------------------------
    def view(self, member: RoomMember) -> MemberView:
        state: MemberState = member.state
        if state not in MEETING_STATES:
            state = mt.activity(in_flight=self.in_flight(member.agent_id), recorded=member.state)
        return MemberView(
            member.agent_id,
            member.room_id,
            member.session_id,
            member.workspace,
            state,
            member.meeting_id,
        )

    async def member_rows(self, tx: Tx, room_id: str) -> list[RoomMember]:
        m = tx.table("room_members").c
        return await tx.select("room_members", m.room_id == room_id, order_by=[m.joined, m.id])

    async def members(self, caller: Principal, room_id: str) -> list[MemberView]:
        async with self.ctx.store.read() as tx:
            await self.check_visible(tx, caller, room_id)
            return [self.view(row) for row in await self.member_rows(tx, room_id)]

    async def join(
        self, caller: Principal, room_id: str, agent_id: str, *, session_id: str | None = None
    ) -> MemberView:
        """Add an agent to a room: by itself or by the operator (joining is consent to be
        summoned). Refused while it is in a meeting, already in a room, has a turn in flight
        (joining changes what a running agent is told), or for a session other than its main
        (work-channel) one: a sub-agent session may not join, or one agent could outvote a room
        with its children."""
        if not (caller.is_operator or caller.id == agent_id):
            raise PermissionDenied(
                f"{caller.id!r} may not add {agent_id!r} to a room; an agent joins by itself, or "
                "the operator adds it",
                code="room_join_forbidden",
            )

        async def job(tx: Tx) -> MemberView:
            # Under the room's row lock, as its deletion takes it: never a member of a room
            # being deleted.
            room = await self._to_join(tx, room_id)
            agent: Principal | None = await tx.get("principals", agent_id)
            if agent is None or agent.kind != "agent":
                raise NotFound(f"no agent {agent_id!r}", code="agent_not_found")
            current: RoomMember | None = await tx.get("room_members", agent_id, for_update=True)
            if current is not None:
                _refuse_in_meeting(current, "join or leave a room")
                raise Conflict(
                    f"{agent_id!r} already belongs to room {current.room_id!r}; an agent belongs "
                    "to at most one room, so leave that room first",
                    code="room_membership_exclusive",
                )
            if agent.work_channel_id is None:
                raise InvalidRequest(
                    f"{agent_id!r} has no work channel, so no session to join with",
                    code="no_work_session",
                )
            main = await self.channels.session(tx, agent, agent.work_channel_id)
            if session_id is not None and session_id != main.id:
                raise PermissionDenied(
                    f"session {session_id!r} is not {agent_id!r}'s main session; a sub-agent or "
                    "child session may not join a room",
                    code="subagent_cannot_join",
                )
            self._refuse_working(agent_id, "join a room")
            now = self.ctx.clock.now()
            member = RoomMember(
                id=agent_id,
                agent_id=agent_id,
                room_id=room.id,
                session_id=main.id,
                workspace=agent.workspace,
                state="idle-waiting",
                joined=now,
                last_activity=now,
            )
            tx.insert("room_members", member)
            self.ctx.events.record(
                tx,
                "room.joined",
                actor=caller.id,
                subject=f"room:{room.id}",
                payload={"agent_id": agent_id, "session_id": main.id},
            )
            return self.view(member)

        return await self.ctx.store.write(job)

    async def leave(self, caller: Principal, room_id: str, agent_id: str) -> None:
        """Take an agent out of its room (itself or the operator); refused in a meeting or while
        it works."""
        if not (caller.is_operator or caller.id == agent_id):
            raise PermissionDenied(
                f"{caller.id!r} may not remove {agent_id!r} from a room; only the agent itself "
                "or the operator may",
                code="room_leave_forbidden",
            )

        async def job(tx: Tx) -> None:
            await self.require(tx, room_id)
            member: RoomMember | None = await tx.get("room_members", agent_id, for_update=True)
            if member is None or member.room_id != room_id:
                raise not_a_member(agent_id, room_id, "leave it")
            _refuse_in_meeting(member, "leave it")
            self._refuse_working(agent_id, "leave it")
            await tx.delete("room_members", agent_id)
            self.ctx.events.record(
                tx,
                "room.left",
                actor=caller.id,
                subject=f"room:{room_id}",
                payload={"agent_id": agent_id},
            )

        await self.ctx.store.write(job)

    async def mark_done(self, caller: Principal, *, done: bool = True) -> MemberView:
        """The caller marks its work done (or not done any more); a summons lets a done member
        enter at once, and dismissal gives it back "done"."""

        async def job(tx: Tx) -> MemberView:
            member: RoomMember | None = await tx.get("room_members", caller.id, for_update=True)
            if member is None:
                raise PermissionDenied(
                    f"{caller.id!r} is in no room; join a room before marking work done",
                    code="not_a_room_member",
                )
            _refuse_in_meeting(member, "mark its work done")
            state: MemberState = "done" if done else "idle-waiting"
            now = self.ctx.clock.now()
            await tx.update("room_members", caller.id, state=state, last_activity=now)
            self.ctx.events.record(
                tx,
                "room.member_state",
                actor=caller.id,
                subject=f"room:{member.room_id}",
                payload={"agent_id": caller.id, "state": state},
            )
            return self.view(member.model_copy(update={"state": state}))

        return await self.ctx.store.write(job)

    # -- the briefing board (R10) -----------------------------------------------------------------
    async def post_brief(self, caller: Principal, text: str) -> Brief:
        """Post a bounded brief to the caller's room; only the latest N per member are kept."""
        check_text(text, "the brief")
        if not text.strip():
            raise InvalidRequest("the brief is empty", code="empty_brief")

        async def job(tx: Tx) -> Brief:
            member: RoomMember | None = await tx.get("room_members", caller.id)
            if member is None:
                raise PermissionDenied(
                    f"{caller.id!r} is in no room; join a room before posting briefs",
                    code="not_a_room_member",
                )
            room = await self.require(tx, member.room_id)
            cap = room.config.brief_max_chars
            if len(text) > cap:
                raise InvalidRequest(
                    f"the brief has {len(text)} characters; room {room.id!r} takes at most "
                    f"{cap}. Shorten it: it is rejected, not truncated",
                    code="brief_too_long",
                    limit=cap,
                    size=len(text),
                )
            now = self.ctx.clock.now()
            brief = Brief(
                id=new_id(),
                room_id=room.id,
                agent_id=caller.id,
                text=text,
                fingerprint=mt.fingerprint(text),
                created=now,
            )
            tx.insert("briefs", brief)
            await tx.flush()
            b = tx.table("briefs").c
            mine: Sequence[Brief] = await tx.select(
                "briefs",
                b.room_id == room.id,
                b.agent_id == caller.id,
                order_by=[b.created.desc(), b.id.desc()],
            )
            for old in mine[room.config.briefs_kept :]:
                await tx.delete("briefs", old.id)
            await tx.update("room_members", caller.id, last_activity=now)
            self.ctx.events.record(
                tx,
                "room.brief",
                actor=caller.id,
                subject=f"room:{room.id}",
                payload={"brief_id": brief.id, "chars": len(text)},
            )
            return brief

        return await self.ctx.store.write(job)

    async def board(self, caller: Principal, room_id: str) -> list[Brief]:
        async with self.ctx.store.read() as tx:
            await self.check_visible(tx, caller, room_id)
            b = tx.table("briefs").c
            return await tx.select("briefs", b.room_id == room_id, order_by=[b.created, b.id])

    @staticmethod
    def board_summary(briefs: Sequence[Brief]) -> str:
        """The board as one text, latest brief per member: broadcast without any model call."""
        latest: dict[str, Brief] = {}
        for brief in briefs:
            latest[brief.agent_id] = brief
        return mt.board_text([(agent, brief.text) for agent, brief in sorted(latest.items())])
