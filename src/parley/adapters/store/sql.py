"""A transaction of the SQL store shared by SQLite and PostgreSQL: parley's records and queries
over one database transaction.

Every statement is a SQLAlchemy Core construct compiled to the dialect's SQL text
(``statements``): those of the store are built once (``queries``); the conditions a caller passes
to ``select``, ``count`` and ``page`` are compiled for the run, after a column list compiled
once per table. The text runs on the transaction's ``Executor``, the driver connection of its
store (``sqlite``, ``postgres``); the store itself, with its group-commit writer, is
``sql_store``. This module imports neither: the store is seen through ``Backend``.

Its length (over 600 lines) is the ``Tx`` port's: one method per query the port names, kept
together so that every statement of a transaction is found in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from sqlalchemy import JSON, Integer, LargeBinary, Text, cast, func, literal_column, or_, select
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.expression import ClauseElement

from parley.adapters.store import queries as q
from parley.adapters.store import schema as s
from parley.adapters.store import search as fts
from parley.adapters.store import usage as usage_sql
from parley.adapters.store.records import RECORDS, row_to, to_row, utc
from parley.adapters.store.statements import (
    Conversions,
    Convert,
    Query,
    Result,
    Statement,
    compile_statement,
    order_clause,
    where_clause,
)
from parley.core.channels import Channel, ChannelMessage, LogicalSession
from parley.core.identity import Principal, TokenRecord
from parley.core.mail import OPEN_STATUSES, InboxFilter, MailSummary, Message
from parley.core.meetings import SpeakerSources
from parley.core.ports import Page
from parley.core.rooms import Meeting
from parley.core.search import SearchHit, SearchQuery, snippet
from parley.core.usage import UsageFilter, UsageTotal

T = TypeVar("T")
Job = Callable[["SqlTx"], Awaitable[T]]
# A transaction's buffered rows by table, and its notifications as (channel, payload).
Rows = dict[str, list[dict[str, Any]]]
Notifications = Sequence[tuple[str, str]]
_PRINCIPALS = frozenset({"principals"})


class Executor(Protocol):
    """Runs SQL text on one driver connection, inside the transaction it is in."""

    async def execute(
        self, sql: str, args: Sequence[Any], outs: Sequence[Convert]
    ) -> tuple[list[tuple[Any, ...]], int]:
        """Run ``sql`` with positional ``args``; its rows, each value through ``outs`` (a
        statement without result columns has none), and the number of rows it changed."""
        ...

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run ``sql`` once per row of positional arguments."""
        ...


class Backend(Protocol):
    """What a transaction needs of its store: the dialect it compiles for, how values are
    converted, and the statements whose form differs by database."""

    compiler: Dialect
    conv: Conversions

    async def insert_rows(self, tx: SqlTx, pending: Rows, notifications: Notifications) -> None:
        """Insert a transaction's buffered rows and send its notifications."""
        ...

    async def take_inbox_positions(self, tx: SqlTx, counts: dict[str, int]) -> dict[str, int]:
        """Take ``counts[r]`` consecutive new positions in each recipient ``r``'s inbox; the
        first of each."""
        ...

    async def mark_delivered(self, tx: SqlTx, ids: list[str], at: datetime) -> list[str]:
        """Mark the pending ones of ``ids`` delivered; the ids marked."""
        ...


# The column list of each record's table, compiled once per dialect: a caller's conditions
# follow it (``SqlTx.select``).
_ROWS = {name: Query(select(table)) for name, (table, _) in RECORDS.items()}
_COUNTS = {
    name: Query(select(func.count()).select_from(table)) for name, (table, _) in RECORDS.items()
}
_LIGHT: dict[tuple[str, str, str, tuple[str, ...]], Query] = {}


def _row_bytes(table: Any, dialect: str) -> Any:
    """The bytes of a row's text and JSON columns, as the database computes them."""
    zero = literal_column("0", Integer)
    sizes = []
    for col in table.columns:
        if isinstance(col.type, Text | JSON):
            text = cast(col, Text)
            size = (
                func.octet_length(text)
                if dialect == "postgresql"
                else func.length(cast(text, LargeBinary))
            )
            sizes.append(func.coalesce(size, zero))
    return sum(sizes[1:], sizes[0]) if sizes else zero


def _light(name: str, key: str, dialect: str, extra: tuple[str, ...]) -> Query:
    """The id, ordering key and size of each row of a table (and the ``extra`` columns), the
    light query a page is chosen from before any whole row is read."""
    query = _LIGHT.get((name, key, dialect, extra))
    if query is None:
        table, _ = RECORDS[name]
        query = _LIGHT[(name, key, dialect, extra)] = Query(
            select(
                table.c.id.label("_id"),
                table.c[key].label("_key"),
                _row_bytes(table, dialect).label("_bytes"),
                *(table.c[col] for col in extra),
            )
        )
    return query


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
    ``executemany`` before any read and at commit: most jobs only append."""

    def __init__(self, executor: Executor, backend: Backend) -> None:
        self.executor = executor
        self.backend = backend
        self._compiler = backend.compiler
        self._conv = backend.conv
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

    @property
    def after(self) -> list[Callable[[], Awaitable[None] | None]]:
        """The callbacks to run once this transaction has committed."""
        return self._after

    def notify_on_commit(self, channel: str, payload: str) -> None:
        """Send a PostgreSQL ``NOTIFY`` in this transaction once its jobs are done, just
        before it commits: it is sent if and only if the data commits (PostgreSQL only)."""
        self.notifications.append((channel, payload))

    async def flush(self) -> None:
        """Place the mail waiting for its inbox position and send the buffered inserts."""
        await self.place_mail()
        pending, self._pending = self._pending, {}
        if pending:
            await self.backend.insert_rows(self, pending, ())

    async def finish(self) -> None:
        """The last statements of a write transaction, before its commit: the buffered
        inserts and the notifications."""
        await self.place_mail()
        pending, self._pending = self._pending, {}
        if pending or self.notifications:
            await self.backend.insert_rows(self, pending, self.notifications)

    async def place_mail(self) -> None:
        """Take the inbox positions of the mail waiting for one, every inbox's at once, and
        buffer the mail's inserts (``deliver_to_inbox``)."""
        unplaced, self._unplaced = self._unplaced, []
        if not unplaced:
            return
        counts = Counter(msg.recipient_id for msg, _ in unplaced)
        following = await self.backend.take_inbox_positions(self, counts)
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

    async def _run(
        self, statement: Statement, args: Sequence[Any], *, reads: frozenset[str] | None
    ) -> Result:
        await self._flush_for(reads)
        rows, count = await self.executor.execute(statement.sql, args, statement.outs)
        return Result(statement.keys, rows, count)

    async def run(
        self,
        query: Query,
        params: Mapping[str, Any] | None = None,
        *,
        reads: frozenset[str] | None = None,
    ) -> Result:
        """Run a statement built once, after the buffered inserts it may read
        (``_flush_for``)."""
        statement = query.statement(self._compiler, self._conv)
        return await self._run(statement, statement.args(params), reads=reads)

    async def execute(self, construct: Any, params: Mapping[str, Any] | None = None) -> Result:
        """Run a construct built for this run (compiled now, with its values or ``params``)."""
        statement = compile_statement(
            construct, self._compiler, self._conv, values=True, params=params
        )
        return await self._run(statement, statement.args(None), reads=None)

    async def insert_many(self, query: Query, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run an ``INSERT`` built once for each of ``rows`` (its columns)."""
        statement = query.statement(self._compiler, self._conv)
        await self.executor.execute_many(statement.sql, [statement.args(row) for row in rows])

    async def _where(
        self,
        head: Query,
        where: Sequence[Any],
        order_by: Sequence[Any] = (),
        limit: int | None = None,
    ) -> Result:
        """``head`` (a statement built once, without parameters) followed by a caller's
        conditions, ordering and limit."""
        order = order_clause(order_by, self._compiler)
        if order is None:
            construct = head.construct.where(*where).order_by(*order_by)
            return await self.execute(construct if limit is None else construct.limit(limit))
        statement = head.statement(self._compiler, self._conv)
        conditions, args = where_clause(where, self._compiler, self._conv)
        sql = statement.sql + conditions + order
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return await self._run(Statement(sql, (), statement.keys, statement.outs), args, reads=None)

    # -- generic records --------------------------------------------------------------------
    def insert(self, name: str, record: BaseModel) -> None:
        """Buffer an insert of a core record into its table."""
        self._pending.setdefault(name, []).append(to_row(name, record))

    async def get(self, name: str, key: str, *, for_update: bool = False) -> Any:
        query = (q.LOCKED_GETS if for_update else q.GETS)[name]
        row = (await self.run(query, {"_key": key})).mapping()
        return None if row is None else row_to(name, row)

    async def update(self, name: str, key: str, **values: Any) -> int:
        if any(isinstance(v, ClauseElement) for v in values.values()):
            table, _ = RECORDS[name]
            result = await self.execute(table.update().where(table.c.id == key).values(**values))
        else:
            params = {f"_v_{col}": v for col, v in values.items()}
            params["_key"] = key
            result = await self.run(q.update_by_id(name, tuple(values)), params)
        return result.rowcount

    async def delete(self, name: str, key: str) -> int:
        return (await self.run(q.DELETES[name], {"_key": key})).rowcount

    async def select(
        self,
        name: str,
        *where: Any,
        order_by: Sequence[Any] = (),
        limit: int | None = None,
    ) -> list[Any]:
        result = await self._where(_ROWS[name], where, order_by, limit)
        return [row_to(name, row) for row in result.mappings()]

    def table(self, name: str) -> Any:
        return RECORDS[name][0]

    async def count(self, name: str, *where: Any) -> int:
        return int((await self._where(_COUNTS[name], where)).scalar_one())

    async def page(
        self, name: str, *where: Any, key: str, limit: int, max_bytes: int | None
    ) -> Page[Any]:
        return await self._page(name, list(where), key=key, limit=limit, max_bytes=max_bytes)

    async def _page(
        self,
        name: str,
        where: list[Any],
        *,
        key: str,
        limit: int,
        max_bytes: int | None,
        descending: bool = False,
        extra: tuple[str, ...] = (),
        keep: Callable[[tuple[Any, ...]], bool] | None = None,
    ) -> Page[Any]:
        """A page chosen from the ids and sizes of the rows (a light query) before any whole row
        is read, so that a page of big rows never holds more than its budget and one row.
        ``keep`` sees a light row: id, key, size, then the ``extra`` columns."""
        table, _ = RECORDS[name]
        key_col = table.c[key]
        order = key_col.desc() if descending else key_col
        if max_bytes is None and keep is None:
            # No budget and no filter of its own: the rows themselves, in one query.
            found = await self.select(name, *where, order_by=[order], limit=limit + 1)
            return Page(found[:limit], len(found) > limit)
        light = _light(name, key, self._compiler.name, extra)
        chosen: list[str] = []
        total = 0
        more = False
        position: Any = None
        while True:
            conds = list(where)
            if position is not None:
                conds.append(key_col < position if descending else key_col > position)
            rows = (await self._where(light, conds, [order], limit + 1)).all()
            for row in rows:
                position = row[1]
                if keep is not None and not keep(row):
                    continue
                if len(chosen) == limit or (
                    max_bytes is not None and chosen and total >= max_bytes
                ):
                    more = True
                    break
                chosen.append(row[0])
                total += int(row[2] or 0)
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
        params = {"_hash": token_hash, "_principal": principal_id, "_label": label, "_at": at}
        await self.run(q.INSERT_TOKEN, params)

    async def principal_by_token(self, token_hash: str) -> Principal | None:
        row = (await self.run(q.PRINCIPAL_BY_TOKEN, {"_hash": token_hash})).mapping()
        return None if row is None else row_to("principals", row)

    async def revoke_tokens(self, principal_id: str, at: datetime) -> int:
        return (await self.run(q.REVOKE_TOKENS, {"_principal": principal_id, "_at": at})).rowcount

    async def tokens_of(self, principal_id: str) -> list[TokenRecord]:
        rows = (await self.run(q.TOKENS_OF, {"_principal": principal_id})).mappings()
        return [
            TokenRecord(
                hash=str(r["hash"]),
                label=str(r["label"]),
                created=utc(r["created"]),
                last_used=utc(r["last_used"]),
            )
            for r in rows
        ]

    async def revoke_token(self, principal_id: str, token_hash: str, at: datetime) -> int:
        params = {"_principal": principal_id, "_hash": token_hash, "_at": at}
        return (await self.run(q.REVOKE_TOKEN, params)).rowcount

    async def touch_token(self, token_hash: str, at: datetime) -> None:
        await self.run(q.TOUCH_TOKEN, {"_hash": token_hash, "_at": at})

    # -- mail -------------------------------------------------------------------------------
    def deliver_to_inbox(self, msg: Message, placed: Callable[[Message], None]) -> None:
        self._unplaced.append((msg, placed))

    async def message_by_idempotency(self, from_id: str, key: str) -> Message | None:
        row = (await self.run(q.BY_IDEMPOTENCY, {"_from": from_id, "_idem": key})).mapping()
        return None if row is None else row_to("messages", row)

    async def list_inbox(self, recipient_id: str, flt: InboxFilter) -> list[Message]:
        return (await self.inbox_page(recipient_id, flt, max_bytes=None)).rows

    async def inbox_page(
        self, recipient_id: str, flt: InboxFilter, *, max_bytes: int | None
    ) -> Page[Message]:
        label = flt.label

        def labelled(row: tuple[Any, ...]) -> bool:
            labels, archive_label = row[3], row[4]
            return label in (labels or ()) or archive_label == label

        return await self._page(
            "messages",
            _inbox_where(recipient_id, flt),
            key="seq",
            limit=flt.limit,
            max_bytes=max_bytes,
            extra=("labels", "archive_label") if label else (),
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
        return await self.backend.mark_delivered(self, wanted, at)

    async def last_broadcast_at(self, sender_id: str) -> datetime | None:
        result = await self.run(q.LAST_BROADCAST, {"_sender": sender_id})
        return utc(result.scalar())  # type: ignore[no-any-return]

    async def expire_due(self, now: datetime) -> list[Message]:
        result = await self.run(q.DUE, {"_now": now})
        due: list[Message] = [row_to("messages", row) for row in result.mappings()]
        if due:
            m = s.messages.c
            await self.execute(
                s.messages.update()
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
        unread = in_progress = blockers = total = 0
        oldest: datetime | None = None
        result = await self.run(q.SUMMARY, {"_recipient": recipient_id})
        for status, kind, count, first in result.all():
            total += count
            if status in ("pending", "delivered"):
                unread += count
                first = utc(first)
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
        rows = (await self.run(q.CHANNEL_MEMBERS, {"_channel": channel_id})).all()
        return [r[0] for r in rows]

    async def get_channel(self, channel_id: str, *, for_update: bool = False) -> Channel | None:
        channel: Channel | None = await self.get("channels", channel_id, for_update=for_update)
        if channel is not None:
            channel.members = await self.channel_members(channel_id)
        return channel

    async def set_members(self, channel_id: str, members: Sequence[str]) -> None:
        await self.run(q.DELETE_MEMBERS, {"_channel": channel_id})
        if members:
            await self.insert_many(
                q.INSERT_MEMBER,
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
            found = await self.execute(
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
        result = await self.run(q.NEXT_SEQ[trigger_id is not None], params)
        return int(result.scalar_one())

    async def claim_channel_seq(
        self, channel_id: str, *, trigger_id: str, task_id: str, now: datetime
    ) -> int | None:
        """Take the next message position for a reply of ``task_id`` only if ``trigger_id`` is
        still the channel's latest trigger, the channel is active and the task has not been
        cancelled; None otherwise. Check and claim are one statement under the channel's row
        lock: this is the linearisation point of supersede (C10)."""
        params = {"_channel": channel_id, "_trigger": trigger_id, "_task": task_id, "_now": now}
        seq = (await self.run(q.CLAIM_SEQ, params)).scalar()
        return None if seq is None else int(seq)

    async def renew_task_leases(self, owner: str, until: datetime) -> list[str]:
        """Extend the leases of the running tasks ``owner`` still holds, in one statement;
        return their ids (a task missing from them was taken over)."""
        result = await self.run(q.RENEW_LEASES, {"_owner": owner, "_until": until})
        return [str(row[0]) for row in result.all()]

    async def last_trigger_id(self, channel_id: str) -> str | None:
        return (await self.run(q.LAST_TRIGGER, {"_channel": channel_id})).scalar()  # type: ignore[no-any-return]

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
            query = q.CHANNEL_ROWS[(after_seq is not None, newest)]
            params = {"_channel": channel_id, "_after": after_seq, "_limit": count + 1}
            result = await self.run(query, params)
            found = [row_to("channel_messages", row) for row in result.mappings()]
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
        rows = sorted((await self.run(q.SPEAKER_SOURCES, params)).all(), key=lambda r: (r[0], r[1]))
        return SpeakerSources(
            channel_members=[r[2] for r in rows if r[0] == 0],
            work=[(r[2], r[3]) for r in rows if r[0] == 1],
            mail=[(r[2], r[3], r[4]) for r in rows if r[0] == 2],
        )

    async def count_meeting_turn(
        self, meeting_id: str, *, spoke: bool, round_number: int
    ) -> Meeting | None:
        params = {"_key": meeting_id, "_spoke": int(spoke), "_round": round_number}
        row = (await self.run(q.COUNT_TURN, params)).mapping()
        return None if row is None else row_to("meetings", row)

    async def session_for(self, agent_id: str, channel_id: str) -> LogicalSession | None:
        params = {"_agent": agent_id, "_channel": channel_id}
        row = (await self.run(q.SESSION_FOR, params)).mapping()
        return None if row is None else row_to("sessions", row)

    # -- usage and search (0007) -----------------------------------------------------------------
    async def usage_totals(
        self, by: str | None, flt: UsageFilter, viewer: str | None
    ) -> list[UsageTotal]:
        result = await self.execute(usage_sql.totals_statement(by, flt, viewer))
        return [UsageTotal.model_validate(row) for row in result.mappings()]

    async def search(
        self, query: SearchQuery, words: list[str], viewer: str | None
    ) -> list[SearchHit]:
        dialect = self._compiler.name
        hits: list[SearchHit] = []
        if query.source in (None, "mail"):
            rows = await self.execute(fts.mail_statement(dialect, query, words, viewer))
            for r in rows.mappings():
                hits.append(
                    SearchHit(
                        source="mail",
                        id=r["id"],
                        sender_id=r["from_id"],
                        recipient_id=r["recipient_id"],
                        created=utc(r["created"]),
                        kind=r["kind"],
                        channel_id=r["to_id"] if r["to_kind"] == "channel" else None,
                        subject=r["subject"],
                        snippet=snippet(r["body"], words),
                    )
                )
        if query.source in (None, "channel"):
            rows = await self.execute(fts.channel_statement(dialect, query, words, viewer))
            for r in rows.mappings():
                hits.append(
                    SearchHit(
                        source="channel",
                        id=r["id"],
                        sender_id=r["sender_id"],
                        created=utc(r["created"]),
                        kind=r["kind"],
                        channel_id=r["channel_id"],
                        subject=r["name"],
                        snippet=snippet(r["content"], words),
                    )
                )
        hits.sort(key=lambda h: (h.created, h.id), reverse=True)
        return hits[: query.limit]
