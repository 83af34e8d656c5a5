"""The SQL store shared by SQLite and PostgreSQL (SQLAlchemy 2 Core, async).

Writes go through a small group-commit writer: callers hand it a job (an async function of a
transaction); the writer runs as many queued jobs as are waiting in one database transaction and
commits once. If any job in a batch raises, the batch is rolled back and every job is run again
alone, so one refused request never takes its neighbours down and never leaves half its writes
behind. Side effects (bus publishes) are registered with ``tx.after_commit`` and run only once
the data they announce is durable: persist before publish.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

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
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
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
from parley.core.errors import ParleyError, StorageError
from parley.core.events import Event
from parley.core.identity import Principal
from parley.core.mail import OPEN_STATUSES, InboxFilter, MailSummary, Message
from parley.core.meetings import SpeakerSources
from parley.core.ports import Page
from parley.core.rooms import Brief, Meeting, Minutes, PulseEntry, Room, RoomMember, Speech
from parley.core.workers import Artifact, Worker

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
_NOTHING: frozenset[str] = frozenset()
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
        """Send the buffered inserts."""
        pending, self._pending = self._pending, {}
        if pending:
            await self.store.insert_rows(self, pending)

    async def _flush_for(self, reads: frozenset[str] | None) -> None:
        """Send the buffered inserts before a statement, so that it sees them. A statement that
        names the only tables it ``reads`` waits for them only if one of those has some: a
        batch's inserts then stay one ``executemany`` per table (on PostgreSQL each flush is a
        round trip per table, and a mail send's inbox position was taking one per job)."""
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
    async def next_inbox_seq(self, recipient_id: str) -> int:
        """The next position in a recipient's inbox, taken under that recipient's row lock."""
        return await self.store.next_inbox_seq(self, recipient_id)

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
        if not buffered.isdisjoint(wanted):
            await self.flush()
        params = {"_ids": wanted, "_at": at}
        if self.store.dialect == "postgresql":
            result = await self._exec_built(prepared.MARK_DELIVERED_ANY, params, reads=_NOTHING)
        else:
            result = await self.conn.execute(prepared.MARK_DELIVERED, params)
        return [row[0] for row in result.all()]

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

    async def channels_of(self, member_id: str | None) -> list[Channel]:
        c = s.channels.c
        if member_id is None:
            rows: list[Channel] = await self.select("channels", order_by=[c.created])
        else:
            cm = s.channel_members.c
            sub = select(cm.channel_id).where(cm.member_id == member_id)
            rows = await self.select(
                "channels", or_(c.id.in_(sub), c.created_by == member_id), order_by=[c.created]
            )
        for ch in rows:
            ch.members = await self.channel_members(ch.id)
        return rows

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


TRANSIENT_RETRIES = 3
_TRANSIENT_STATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure


def _transient(exc: BaseException) -> bool:
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state in _TRANSIENT_STATES or "deadlock detected" in str(exc)


class SqlStore:
    """A parley store on one SQLAlchemy async engine (plus a dedicated writer connection)."""

    dialect = "sql"
    writer_count = 1
    # Whether ``write(eager=True)`` may run a job in the caller's task: only where statements
    # and the commit never suspend (SQLite's writer on the loop), so a cancel cannot land inside
    # a commit (a job cancelled while awaiting something else is rolled back whole), and where
    # batching saves little (a PostgreSQL commit waits for the server's WAL flush).
    eager_writes = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: AsyncEngine | None = None
        self._queue: asyncio.Queue[tuple[Job[Any], asyncio.Future[Any]]] = asyncio.Queue()
        self._writers: list[asyncio.Task[None]] = []
        self.max_batch = 256
        # Held while a batch or an eager write runs: one transaction at a time on the writer.
        self._writing = asyncio.Lock()
        self._owner: str | None = None
        # Told the number of jobs of each committed batch (the hub's metrics).
        self.on_batch: Callable[[int], None] | None = None
        self._locked_gets: dict[str, Any] = {}

    # -- dialect hooks ----------------------------------------------------------------------
    def lock_row(self, stmt: Any) -> Any:
        return stmt

    def get_by_id(self, name: str, *, for_update: bool) -> Any:
        """The statement reading one record by id, with this dialect's row lock if
        ``for_update``: built once, as every trigger, reply and finish locks a row."""
        if not for_update:
            return _GETS[name]
        stmt = self._locked_gets.get(name)
        if stmt is None:
            stmt = self._locked_gets[name] = self.lock_row(_GETS[name])
        return stmt

    async def insert_rows(
        self, tx: SqlTx, pending: Rows, notifications: Notifications = ()
    ) -> None:
        """Insert a transaction's buffered rows (by table), one ``executemany`` per table, and
        send its ``notifications`` (which only PostgreSQL has)."""
        if notifications:
            raise StorageError(f"{self.dialect} has no NOTIFY: the cluster bus needs PostgreSQL")
        for name, rows in pending.items():
            if tx.direct is not None:
                tx.direct.insert_many(_INSERTS[name], rows)
            else:
                await tx.conn.execute(_INSERTS[name], rows)

    async def finish(self, tx: SqlTx) -> None:
        """The last statements of a write transaction, before its commit."""
        pending, tx._pending = tx._pending, {}
        if pending or tx.notifications:
            await self.insert_rows(tx, pending, tx.notifications)

    async def mark_alive(self, owner: str) -> None:
        self._owner = owner

    async def is_alive(self, owner: str) -> bool:
        # One process per store (SQLite's data root lock): any other hub id is a dead one.
        return owner == self._owner

    async def next_inbox_seq(self, tx: SqlTx, recipient_id: str) -> int:
        result = await tx._exec_built(
            prepared.NEXT_INBOX_SEQ, {"_recipient": recipient_id}, reads=_PRINCIPALS
        )
        return int(result.scalar_one())

    # -- lifecycle --------------------------------------------------------------------------
    async def open(self) -> None:
        raise NotImplementedError

    async def start_writers(self) -> None:
        for i in range(self.writer_count):
            self._writers.append(
                asyncio.create_task(self._writer_loop(), name=f"parley-writer-{i}")
            )

    async def close(self) -> None:
        for task in self._writers:
            task.cancel()
        for task in self._writers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._writers.clear()
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None

    # -- transactions -----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[SqlTx]:
        """A read-only transaction on a pooled connection."""
        assert self.engine is not None, "store is not open"
        try:
            async with self.engine.connect() as conn:
                yield SqlTx(conn, self)
        except (SQLAlchemyError, DBAPIError) as exc:
            raise StorageError(f"reading from the store failed: {exc}") from exc

    async def write(self, job: Job[T], *, eager: bool = False) -> T:
        """Run ``job`` in a write transaction (possibly batched with others) and return its
        result once committed (see ``Store.write`` for ``eager``)."""
        if not self._writers:
            await self.start_writers()
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if eager and self.eager_writes and self._queue.empty() and not self._writing.locked():
            # Taking a free asyncio lock does not suspend: no batch can start in between.
            async with self._writing:
                await self._run_alone((job, fut))
            return fut.result()
        await self._queue.put((job, fut))
        return await fut

    async def _writer_loop(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            live = [(job, fut) for job, fut in batch if not fut.cancelled()]
            if not live:
                continue
            async with self._writing:
                if len(live) == 1 or not await self._run_batch(live):
                    for item in live:
                        await self._run_alone(item)

    async def _run_alone(self, item: tuple[Job[Any], asyncio.Future[Any]]) -> None:
        """Run one job in its own transaction, again if the database broke a deadlock or a
        serialization conflict by aborting it (PostgreSQL with several hubs)."""
        for attempt in range(TRANSIENT_RETRIES + 1):
            if await self._run_batch([item], final=attempt == TRANSIENT_RETRIES):
                return

    async def _run_batch(
        self, batch: list[tuple[Job[Any], asyncio.Future[Any]]], *, final: bool = True
    ) -> bool:
        """Run jobs in one transaction. Returns False (rolled back, nothing resolved) if a job
        failed inside a multi-job batch, so the caller can retry each alone, or if a lone job
        hit a transient conflict and this is not its ``final`` attempt."""
        assert self.engine is not None
        results: list[Any] = []
        afters: list[Callable[[], Awaitable[None] | None]] = []
        try:
            # One transaction object for the whole batch, so the buffered inserts of all its
            # jobs go out as one executemany per table.
            async with (
                self._write_connection() as conn,
                self._write_transaction(conn, batch=len(batch) > 1) as tx,
            ):
                for job, _ in batch:
                    results.append(await job(tx))
                await self.finish(tx)
                afters = tx._after
        except Exception as exc:
            if len(batch) > 1 or (not final and _transient(exc)):
                return False
            _, fut = batch[0]
            if not fut.done():
                fut.set_exception(self._wrap(exc))
            return True
        for (_, fut), result in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(result)
        if self.on_batch is not None:
            self.on_batch(len(batch))
        for callback in afters:
            try:
                outcome = callback()
                if outcome is not None:
                    await outcome
            except Exception:  # a failed publish never undoes a commit (C10 publish_failed)
                import logging

                logging.getLogger("parley.store").exception("after-commit callback failed")
        return True

    def _wrap(self, exc: BaseException) -> BaseException:
        if isinstance(exc, ParleyError):
            return exc
        if isinstance(exc, (SQLAlchemyError, DBAPIError)):
            err = StorageError(f"writing to the store failed: {exc.__class__.__name__}: {exc}")
            err.__cause__ = exc
            return err
        return exc

    @contextlib.asynccontextmanager
    async def _write_transaction(
        self, conn: AsyncConnection, *, batch: bool
    ) -> AsyncIterator[SqlTx]:
        """Begins a write transaction on ``conn`` (for a ``batch`` of several jobs, or one job)
        and gives its transaction object; commits it, or rolls it back on error."""
        async with conn.begin():
            yield SqlTx(conn, self)

    @contextlib.asynccontextmanager
    async def _write_connection(self) -> AsyncIterator[AsyncConnection]:
        assert self.engine is not None
        async with self.engine.connect() as conn:
            yield conn
