"""A transaction of the SQL store shared by SQLite and PostgreSQL (SQLAlchemy 2 Core, async):
parley's records and queries over one database transaction. The store itself, with its
group-commit writer, is ``sql_store``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import (
    JSON,
    LargeBinary,
    Text,
    bindparam,
    cast,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.expression import ClauseElement

from parley.adapters.store import prepared
from parley.adapters.store import schema as s
from parley.adapters.store.sqlite_direct import DirectSqlite
from parley.core.bridge import BridgeLink, BridgePlace, BridgeRelay, LinkCode
from parley.core.channels import (
    Channel,
    ChannelMessage,
    Invocation,
    LogicalSession,
    PendingTurn,
    Task,
)
from parley.core.consent import Invitation
from parley.core.events import Event
from parley.core.identity import Principal
from parley.core.mail import OPEN_STATUSES, InboxFilter, MailSummary, Message
from parley.core.meetings import SpeakerSources
from parley.core.ports import Page
from parley.core.rooms import Brief, Meeting, Minutes, PulseEntry, Room, RoomMember, Speech
from parley.core.workers import Artifact, Worker

if TYPE_CHECKING:
    from parley.adapters.store.sql_store import SqlStore

T = TypeVar("T")
Job = Callable[["SqlTx"], Awaitable[T]]
# A transaction's buffered rows by table, and its notifications as (channel, payload).
Rows = dict[str, list[dict[str, Any]]]
Notifications = Sequence[tuple[str, str]]

# Tables whose rows map one-to-one onto a core model: generic insert/get/update serve them.
_RECORDS: dict[str, tuple[Any, type[BaseModel]]] = {
    "principals": (s.principals, Principal),
    "events": (s.events, Event),
    "messages": (s.messages, Message),
    "channels": (s.channels, Channel),
    "channel_messages": (s.channel_messages, ChannelMessage),
    "sessions": (s.sessions, LogicalSession),
    "tasks": (s.tasks, Task),
    "invocations": (s.invocations, Invocation),
    "pending_turns": (s.pending_turns, PendingTurn),
    "invitations": (s.invitations, Invitation),
    "rooms": (s.rooms, Room),
    "room_members": (s.room_members, RoomMember),
    "meetings": (s.meetings, Meeting),
    "speeches": (s.speeches, Speech),
    "minutes": (s.minutes, Minutes),
    "briefs": (s.briefs, Brief),
    "pulse_log": (s.pulse_log, PulseEntry),
    "workers": (s.workers, Worker),
    "worker_artifacts": (s.worker_artifacts, Artifact),
    "bridge_places": (s.bridge_places, BridgePlace),
    "bridge_relays": (s.bridge_relays, BridgeRelay),
    "bridge_links": (s.bridge_links, BridgeLink),
    "bridge_link_codes": (s.bridge_link_codes, LinkCode),
}
# Each record's table by name (the PostgreSQL store's bulk inserts).
RECORD_TABLES = {name: table for name, (table, _) in _RECORDS.items()}
_PRINCIPALS = frozenset({"principals"})
_COLUMNS = {name: frozenset(table.columns.keys()) for name, (table, _) in _RECORDS.items()}
_TS_COLUMNS = {
    name: {c.name for c in table.columns if isinstance(c.type, type(s.TS))}
    for name, (table, _) in _RECORDS.items()
}


# Statements built once: building a SQLAlchemy construct and its cache key costs more than running
# it on SQLite, and these run for every message, mail and turn.
_INSERTS = {name: table.insert() for name, (table, _) in _RECORDS.items()}
_GETS = {
    name: select(table).where(table.c.id == bindparam("_key"))
    for name, (table, _) in _RECORDS.items()
}
_UPDATES: dict[tuple[str, tuple[str, ...]], Any] = {}
_CLAIM_SEQ = (
    update(s.channels)
    .where(
        s.channels.c.id == bindparam("_channel"),
        s.channels.c.last_trigger_id == bindparam("_trigger"),
        s.channels.c.status == "active",
        ~select(s.tasks.c.id)
        .where(s.tasks.c.id == bindparam("_task"), s.tasks.c.cancel_requested.is_(True))
        .exists(),
    )
    .values(last_seq=s.channels.c.last_seq + 1, last_activity=bindparam("_now"))
    .returning(s.channels.c.last_seq)
)


def _update_by_id(name: str, columns: tuple[str, ...]) -> Any:
    """``UPDATE <table> SET <columns> WHERE id = :_key`` with bound values, built once."""
    stmt = _UPDATES.get((name, columns))
    if stmt is None:
        table, _ = _RECORDS[name]
        stmt = (
            update(table)
            .where(table.c.id == bindparam("_key"))
            .values({col: bindparam(f"_v_{col}") for col in columns})
        )
        _UPDATES[(name, columns)] = stmt
    return stmt


def _utc(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _row_to(name: str, row: Mapping[str, Any]) -> Any:
    _table, model = _RECORDS[name]
    data = dict(row)
    for col in _TS_COLUMNS[name]:
        if col in data:
            data[col] = _utc(data[col])
    if name == "channels":
        data.setdefault("members", [])
    return model.model_validate(data)


def _to_row(name: str, record: BaseModel) -> dict[str, Any]:
    data = record.model_dump()
    cols = _COLUMNS[name]
    row = {k: v for k, v in data.items() if k in cols}
    if name == "messages":
        msg: Message = record  # type: ignore[assignment]
        row["expires_at"] = msg.expires_at
    return row


def _inbox_where(recipient_id: str, flt: InboxFilter) -> list[Any]:
    """The conditions of an inbox listing; a label is matched in Python (labels are JSON)."""
    m = s.messages.c
    where: list[Any] = [m.recipient_id == recipient_id]
    if flt.status:
        where.append(m.status.in_(flt.status))
    elif not flt.include_archived:
        where.append(m.status.in_((*OPEN_STATUSES, "expired", "failed")))
    if flt.unread:
        where.append(m.status.in_(("pending", "delivered")))
    if flt.kind:
        where.append(m.kind == flt.kind)
    if flt.from_id:
        where.append(m.from_id == flt.from_id)
    if flt.after_seq is not None:
        where.append(m.seq > flt.after_seq)
    if flt.since:
        where.append(m.created >= datetime.fromisoformat(flt.since.replace("Z", "+00:00")))
    return where


class SqlTx:
    """One database transaction with parley's queries. Inserts are buffered and flushed with
    ``executemany`` before any read and at commit: most jobs only append. On the SQLite writer,
    statements built once run on its connection ``direct``ly (see ``sqlite_direct``)."""

    def __init__(
        self, conn: AsyncConnection, store: SqlStore, direct: DirectSqlite | None = None
    ) -> None:
        self.conn = conn
        self.store = store
        self.direct = direct
        self._pending: Rows = {}
        # Mail waiting for its inbox position (``deliver_to_inbox``).
        self._unplaced: list[tuple[Message, Callable[[Message], None]]] = []
        self._after: list[Callable[[], Awaitable[None] | None]] = []
        # (channel, payload) of each NOTIFY this transaction sends just before it commits.
        self.notifications: list[tuple[str, str]] = []

    # -- plumbing ---------------------------------------------------------------------------
    def after_commit(self, callback: Callable[[], Awaitable[None] | None]) -> None:
        """Run ``callback`` once this transaction has committed (never if it rolls back)."""
        self._after.append(callback)

    def notify_on_commit(self, channel: str, payload: str) -> None:
        """Send a PostgreSQL ``NOTIFY`` in this transaction once its jobs are done, just
        before it commits: it is sent if and only if the data commits (PostgreSQL only)."""
        self.notifications.append((channel, payload))

    async def flush(self) -> None:
        """Place the mail waiting for its inbox position and send the buffered inserts."""
        await self.place_mail()
        pending, self._pending = self._pending, {}
        if pending:
            await self.store.insert_rows(self, pending)

    async def place_mail(self) -> None:
        """Take the inbox positions of the mail waiting for one, every inbox's at once, and
        buffer the mail's inserts (``deliver_to_inbox``)."""
        unplaced, self._unplaced = self._unplaced, []
        if not unplaced:
            return
        counts = Counter(msg.recipient_id for msg, _ in unplaced)
        following = await self.store.take_inbox_positions(self, counts)
        for msg, placed in unplaced:
            msg.seq = following[msg.recipient_id]
            following[msg.recipient_id] += 1
            self.insert("messages", msg)
            placed(msg)

    async def _flush_for(self, reads: frozenset[str] | None) -> None:
        """Send the buffered inserts before a statement, so that it sees them. A statement that
        names the only tables it ``reads`` waits for them only if one of those has some: a
        batch's inserts then stay one ``executemany`` per table (on PostgreSQL each flush is a
        round trip per table). Mail waiting for its inbox position is placed first if the
        statement reads mail."""
        if self._unplaced and (reads is None or "messages" in reads):
            await self.place_mail()
        if self._pending and (reads is None or not reads.isdisjoint(self._pending)):
            await self.flush()

    async def _exec(self, stmt: Any, params: dict[str, Any] | None = None) -> Any:
        await self._flush_for(None)
        return await self.conn.execute(stmt, params)

    async def _exec_built(
        self, stmt: Any, params: dict[str, Any], *, reads: frozenset[str] | None = None
    ) -> Any:
        """Run a statement built once (never one built per call: each is compiled and kept),
        after the buffered inserts it may read (``_flush_for``)."""
        await self._flush_for(reads)
        if self.direct is not None:
            return self.direct.execute(stmt, params)
        return await self.conn.execute(stmt, params)

    # -- generic records --------------------------------------------------------------------
    def insert(self, name: str, record: BaseModel) -> None:
        """Buffer an insert of a core record into its table."""
        self._pending.setdefault(name, []).append(_to_row(name, record))

    async def get(self, name: str, key: str, *, for_update: bool = False) -> Any:
        stmt = self.store.get_by_id(name, for_update=for_update)
        row = (await self._exec_built(stmt, {"_key": key})).mappings().first()
        return None if row is None else _row_to(name, row)

    async def update(self, name: str, key: str, **values: Any) -> int:
        if any(isinstance(v, ClauseElement) for v in values.values()):
            table, _ = _RECORDS[name]
            result = await self._exec(update(table).where(table.c.id == key).values(**values))
        else:
            stmt = _update_by_id(name, tuple(values))
            params = {f"_v_{col}": v for col, v in values.items()}
            params["_key"] = key
            result = await self._exec_built(stmt, params)
        return int(result.rowcount)

    async def delete(self, name: str, key: str) -> int:
        table, _ = _RECORDS[name]
        result = await self._exec(delete(table).where(table.c.id == key))
        return int(result.rowcount)

    async def select(
        self,
        name: str,
        *where: Any,
        order_by: Sequence[Any] = (),
        limit: int | None = None,
    ) -> list[Any]:
        table, _ = _RECORDS[name]
        stmt = select(table).where(*where)
        if order_by:
            stmt = stmt.order_by(*order_by)
        if limit is not None:
            stmt = stmt.limit(limit)
        return [_row_to(name, row) for row in (await self._exec(stmt)).mappings().all()]

    def table(self, name: str) -> Any:
        return _RECORDS[name][0]

    async def count(self, name: str, *where: Any) -> int:
        table, _ = _RECORDS[name]
        stmt = select(func.count()).select_from(table).where(*where)
        return int((await self._exec(stmt)).scalar_one())

    async def page(
        self, name: str, *where: Any, key: str, limit: int, max_bytes: int | None
    ) -> Page[Any]:
        return await self._page(name, list(where), key=key, limit=limit, max_bytes=max_bytes)

    def _row_bytes(self, table: Any) -> Any:
        """The bytes of a row's text and JSON columns, as the database computes them."""
        sizes = []
        for col in table.columns:
            if isinstance(col.type, Text | JSON):
                text = cast(col, Text)
                size = (
                    func.octet_length(text)
                    if self.store.dialect == "postgresql"
                    else func.length(cast(text, LargeBinary))
                )
                sizes.append(func.coalesce(size, 0))
        return sum(sizes[1:], sizes[0]) if sizes else func.coalesce(None, 0)

    async def _page(
        self,
        name: str,
        where: list[Any],
        *,
        key: str,
        limit: int,
        max_bytes: int | None,
        descending: bool = False,
        extra: Sequence[Any] = (),
        keep: Callable[[Any], bool] | None = None,
    ) -> Page[Any]:
        """A page chosen from the ids and sizes of the rows (a light query) before any whole row
        is read, so that a page of big rows never holds more than its budget and one row."""
        table, _ = _RECORDS[name]
        key_col = table.c[key]
        order = key_col.desc() if descending else key_col
        if max_bytes is None and keep is None:
            # No budget and no filter of its own: the rows themselves, in one query.
            found = await self.select(name, *where, order_by=[order], limit=limit + 1)
            return Page(found[:limit], len(found) > limit)
        light = select(
            table.c.id.label("_id"),
            key_col.label("_key"),
            self._row_bytes(table).label("_bytes"),
            *extra,
        ).order_by(order)
        chosen: list[str] = []
        total = 0
        more = False
        position: Any = None
        while True:
            conds = list(where)
            if position is not None:
                conds.append(key_col < position if descending else key_col > position)
            rows = (await self._exec(light.where(*conds).limit(limit + 1))).all()
            for row in rows:
                position = row._key
                if keep is not None and not keep(row):
                    continue
                if len(chosen) == limit or (
                    max_bytes is not None and chosen and total >= max_bytes
                ):
                    more = True
                    break
                chosen.append(row._id)
                total += int(row._bytes or 0)
            # Without a filter of its own, one light query of limit + 1 rows decides the page.
            if more or keep is None or len(rows) <= limit:
                break
        if not chosen:
            return Page([], more)
        return Page(await self.select(name, table.c.id.in_(chosen), order_by=[order]), more)

    # -- identity ---------------------------------------------------------------------------
    async def insert_token(
        self, token_hash: str, principal_id: str, label: str, at: datetime
    ) -> None:
        await self._exec(
            s.tokens.insert().values(
                hash=token_hash, principal_id=principal_id, label=label, created=at
            )
        )

    async def principal_by_token(self, token_hash: str) -> Principal | None:
        stmt = (
            select(s.principals)
            .join(s.tokens, s.tokens.c.principal_id == s.principals.c.id)
            .where(s.tokens.c.hash == token_hash, s.tokens.c.revoked_at.is_(None))
        )
        row = (await self._exec(stmt)).mappings().first()
        return None if row is None else _row_to("principals", row)

    async def revoke_tokens(self, principal_id: str, at: datetime) -> int:
        result = await self._exec(
            update(s.tokens)
            .where(s.tokens.c.principal_id == principal_id, s.tokens.c.revoked_at.is_(None))
            .values(revoked_at=at)
        )
        return int(result.rowcount)

    # -- mail -------------------------------------------------------------------------------
    def deliver_to_inbox(self, msg: Message, placed: Callable[[Message], None]) -> None:
        self._unplaced.append((msg, placed))

    async def message_by_idempotency(self, from_id: str, key: str) -> Message | None:
        rows = await self.select(
            "messages",
            s.messages.c.from_id == from_id,
            s.messages.c.idempotency_key == key,
            s.messages.c.copy_of.is_(None),
        )
        return rows[0] if rows else None

    async def list_inbox(self, recipient_id: str, flt: InboxFilter) -> list[Message]:
        return (await self.inbox_page(recipient_id, flt, max_bytes=None)).rows

    async def inbox_page(
        self, recipient_id: str, flt: InboxFilter, *, max_bytes: int | None
    ) -> Page[Message]:
        label = flt.label
        m = s.messages.c

        def labelled(row: Any) -> bool:
            return label in (row.labels or ()) or row.archive_label == label

        return await self._page(
            "messages",
            _inbox_where(recipient_id, flt),
            key="seq",
            limit=flt.limit,
            max_bytes=max_bytes,
            extra=(m.labels, m.archive_label) if label else (),
            keep=labelled if label else None,
        )

    async def mark_delivered(self, ids: Sequence[str], at: datetime) -> list[str]:
        if not ids:
            return []
        wanted = list(ids)
        # Mail is marked delivered once a reader has seen it, so it is committed: the sends
        # buffered by other jobs of this batch need not go out first, unless one is marked.
        buffered = {row["id"] for row in self._pending.get("messages", ())}
        buffered.update(msg.id for msg, _ in self._unplaced)
        if not buffered.isdisjoint(wanted):
            await self.flush()
        return await self.store.mark_delivered(self, wanted, at)

    async def last_broadcast_at(self, sender_id: str) -> datetime | None:
        m = s.messages.c
        stmt = select(func.max(m.created)).where(
            m.from_id == sender_id, m.to_kind == "broadcast", m.copy_of.is_(None)
        )
        return _utc((await self._exec(stmt)).scalar())  # type: ignore[no-any-return]

    async def expire_due(self, now: datetime) -> list[Message]:
        m = s.messages.c
        due = await self.select(
            "messages", m.status.in_(OPEN_STATUSES), m.expires_at <= now, order_by=[m.expires_at]
        )
        if due:
            await self._exec(
                update(s.messages)
                .where(m.id.in_([d.id for d in due]), m.status.in_(OPEN_STATUSES))
                .values(status="expired", failure_reason="ttl_expired")
            )
        return due

    async def thread_messages(self, ids: set[str], correlation: set[str]) -> list[Message]:
        m = s.messages.c
        conds = [m.id.in_(ids), m.parent_message_id.in_(ids), m.copy_of.in_(ids)]
        if correlation:
            conds.append(m.correlation_id.in_(correlation))
        return await self.select("messages", or_(*conds), order_by=[m.created, m.id])

    async def summary(self, recipient_id: str, now: datetime) -> MailSummary:
        m = s.messages.c
        stmt = (
            select(m.status, m.kind, func.count(), func.min(m.created))
            .where(m.recipient_id == recipient_id, m.status.in_(OPEN_STATUSES))
            .group_by(m.status, m.kind)
        )
        unread = in_progress = blockers = total = 0
        oldest: datetime | None = None
        for status, kind, count, first in (await self._exec(stmt)).all():
            total += count
            if status in ("pending", "delivered"):
                unread += count
                first = _utc(first)
                oldest = first if oldest is None or first < oldest else oldest
            if status == "in_progress":
                in_progress += count
            if kind == "blocker":
                blockers += count
        return MailSummary(
            agent_id=recipient_id,
            unread=unread,
            in_progress=in_progress,
            oldest_pending_age_s=None if oldest is None else (now - oldest).total_seconds(),
            open_blockers=blockers,
            total_open=total,
        )

    # -- channels ---------------------------------------------------------------------------
    async def channel_members(self, channel_id: str) -> list[str]:
        rows = (await self._exec_built(prepared.CHANNEL_MEMBERS, {"_channel": channel_id})).all()
        return [r[0] for r in rows]

    async def get_channel(self, channel_id: str, *, for_update: bool = False) -> Channel | None:
        channel: Channel | None = await self.get("channels", channel_id, for_update=for_update)
        if channel is not None:
            channel.members = await self.channel_members(channel_id)
        return channel

    async def set_members(self, channel_id: str, members: Sequence[str]) -> None:
        cm = s.channel_members
        await self._exec(cm.delete().where(cm.c.channel_id == channel_id))
        if members:
            await self.conn.execute(
                cm.insert(),
                [
                    {"channel_id": channel_id, "member_id": mid, "position": i}
                    for i, mid in enumerate(members)
                ],
            )

    async def channels_page(
        self,
        member_id: str | None,
        *,
        after: str | None,
        kinds: Sequence[str] | None,
        limit: int,
        max_bytes: int | None,
    ) -> Page[Channel]:
        c = s.channels.c
        where: list[Any] = [c.status != "deleted"]
        if member_id is not None:
            cm = s.channel_members.c
            sub = select(cm.channel_id).where(cm.member_id == member_id)
            where.append(or_(c.id.in_(sub), c.created_by == member_id))
        if kinds is not None:
            where.append(c.kind.in_(list(kinds)))
        if after is not None:
            where.append(c.id > after)
        page: Page[Channel] = await self._page(
            "channels", where, key="id", limit=limit, max_bytes=max_bytes
        )
        if page.rows:
            # Every member of the page's channels in one query, not one query per channel.
            cm = s.channel_members.c
            found = await self._exec(
                select(cm.channel_id, cm.member_id)
                .where(cm.channel_id.in_([ch.id for ch in page.rows]))
                .order_by(cm.channel_id, cm.position)
            )
            members: dict[str, list[str]] = {}
            for channel_id, member in found.all():
                members.setdefault(channel_id, []).append(member)
            for ch in page.rows:
                ch.members = members.get(ch.id, [])
        return page

    async def next_channel_seq(
        self, channel_id: str, *, trigger_id: str | None = None, now: datetime | None = None
    ) -> int:
        """Take the next message position of a channel (under its row lock); a trigger message
        also becomes the channel's latest trigger in the same statement."""
        params = {"_channel": channel_id, "_now": now or datetime.now(UTC)}
        if trigger_id is not None:
            params["_trigger"] = trigger_id
        result = await self._exec_built(prepared.NEXT_SEQ[trigger_id is not None], params)
        return int(result.scalar_one())

    async def claim_channel_seq(
        self, channel_id: str, *, trigger_id: str, task_id: str, now: datetime
    ) -> int | None:
        """Take the next message position for a reply of ``task_id`` only if ``trigger_id`` is
        still the channel's latest trigger, the channel is active and the task has not been
        cancelled; None otherwise. Check and claim are one statement under the channel's row
        lock: this is the linearisation point of supersede (C10)."""
        params = {"_channel": channel_id, "_trigger": trigger_id, "_task": task_id, "_now": now}
        seq = (await self._exec_built(_CLAIM_SEQ, params)).scalar()
        return None if seq is None else int(seq)

    async def renew_task_leases(self, owner: str, until: datetime) -> list[str]:
        """Extend the leases of the running tasks ``owner`` still holds, in one statement;
        return their ids (a task missing from them was taken over)."""
        t = s.tasks.c
        result = await self._exec(
            update(s.tasks)
            .where(t.owner == owner, t.status == "running")
            .values(lease_until=until)
            .returning(t.id)
        )
        return [str(row[0]) for row in result]

    async def last_trigger_id(self, channel_id: str) -> str | None:
        c = s.channels.c
        stmt = self.store.lock_row(select(c.last_trigger_id).where(c.id == channel_id))
        return (await self._exec(stmt)).scalar()  # type: ignore[no-any-return]

    async def channel_messages(
        self,
        channel_id: str,
        *,
        after_seq: int | None = None,
        latest: int | None = None,
        limit: int = 500,
    ) -> list[ChannelMessage]:
        page = await self.channel_page(
            channel_id, after_seq=after_seq, latest=latest, limit=limit, max_bytes=None
        )
        return page.rows

    async def channel_page(
        self,
        channel_id: str,
        *,
        after_seq: int | None = None,
        latest: int | None = None,
        limit: int = 500,
        max_bytes: int | None,
    ) -> Page[ChannelMessage]:
        # The latest messages are chosen newest first and returned in channel order.
        newest = latest is not None
        count = latest if latest is not None else limit
        if max_bytes is None:
            # The hot path of every prompt: one statement built once, limit + 1 rows.
            stmt = prepared.CHANNEL_ROWS[(after_seq is not None, newest)]
            params = {"_channel": channel_id, "_after": after_seq, "_limit": count + 1}
            rows = (await self._exec_built(stmt, params)).mappings().all()
            found = [_row_to("channel_messages", row) for row in rows]
            page = Page(found[:count], len(found) > count)
        else:
            cm = s.channel_messages.c
            where: list[Any] = [cm.channel_id == channel_id]
            if after_seq is not None:
                where.append(cm.seq > after_seq)
            page = await self._page(
                "channel_messages",
                where,
                key="seq",
                limit=count,
                max_bytes=max_bytes,
                descending=newest,
            )
        return Page(page.rows[::-1], page.more) if newest else page

    async def speaker_sources(
        self, meeting_channel_id: str, agent_id: str, work_channel_id: str | None, latest: int
    ) -> SpeakerSources:
        params = {
            "_meeting_channel": meeting_channel_id,
            "_work_channel": work_channel_id,
            "_agent": agent_id,
            "_latest": latest,
        }
        # A compound select keeps no order of its own: each row carries its part and position.
        rows = sorted(
            (await self._exec_built(prepared.SPEAKER_SOURCES, params)).all(),
            key=lambda r: (r[0], r[1]),
        )
        return SpeakerSources(
            channel_members=[r[2] for r in rows if r[0] == 0],
            work=[(r[2], r[3]) for r in rows if r[0] == 1],
            mail=[(r[2], r[3], r[4]) for r in rows if r[0] == 2],
        )

    async def count_meeting_turn(
        self, meeting_id: str, *, spoke: bool, round_number: int
    ) -> Meeting | None:
        params = {"_key": meeting_id, "_spoke": int(spoke), "_round": round_number}
        row = (await self._exec_built(prepared.COUNT_TURN, params)).mappings().first()
        return None if row is None else _row_to("meetings", row)

    async def session_for(self, agent_id: str, channel_id: str) -> LogicalSession | None:
        params = {"_agent": agent_id, "_channel": channel_id}
        row = (await self._exec_built(prepared.SESSION_FOR, params)).mappings().first()
        return None if row is None else _row_to("sessions", row)
