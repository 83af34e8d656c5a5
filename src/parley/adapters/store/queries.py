"""The store's statements, built once as SQLAlchemy Core constructs over ``schema``'s tables.

Each is compiled once per dialect on first use (``statements.Query``), with bound parameters
(named ``_<what>``) for everything that varies: building and compiling a construct costs more
than running it on SQLite, and these run for every message, prompt and meeting turn. The
per-dialect statements (PostgreSQL's arrays, SQLite's JSON lists) live beside their store.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Integer,
    Text,
    bindparam,
    delete,
    func,
    literal_column,
    or_,
    select,
    union_all,
    update,
)

from parley.adapters.store import schema as s
from parley.adapters.store.records import RECORDS
from parley.adapters.store.statements import Query
from parley.core.mail import OPEN_STATUSES

# -- generic records ----------------------------------------------------------------------------
# A record by id, and with its row locked (SQLite has no row locks: its one writer holds the
# database; the lock clause is rendered only where the dialect has one).
GETS = {
    name: Query(select(table).where(table.c.id == bindparam("_key")))
    for name, (table, _) in RECORDS.items()
}
LOCKED_GETS = {
    name: Query(select(table).where(table.c.id == bindparam("_key")).with_for_update())
    for name, (table, _) in RECORDS.items()
}
DELETES = {
    name: Query(delete(table).where(table.c.id == bindparam("_key")))
    for name, (table, _) in RECORDS.items()
}
_INSERTS: dict[tuple[str, tuple[str, ...]], Query] = {}
_UPDATES: dict[tuple[str, tuple[str, ...]], Query] = {}


def insert(name: str, columns: tuple[str, ...]) -> Query:
    """``INSERT INTO <table> (<columns>) VALUES (…)``, one per shape of row, built once."""
    query = _INSERTS.get((name, columns))
    if query is None:
        table, _ = RECORDS[name]
        query = _INSERTS[(name, columns)] = Query(table.insert(), columns)
    return query


def update_by_id(name: str, columns: tuple[str, ...]) -> Query:
    """``UPDATE <table> SET <columns> WHERE id = :_key`` with bound values, built once."""
    query = _UPDATES.get((name, columns))
    if query is None:
        table, _ = RECORDS[name]
        query = _UPDATES[(name, columns)] = Query(
            update(table)
            .where(table.c.id == bindparam("_key"))
            .values({col: bindparam(f"_v_{col}") for col in columns})
        )
    return query


# -- identity -----------------------------------------------------------------------------------
INSERT_TOKEN = Query(
    s.tokens.insert().values(
        hash=bindparam("_hash"),
        principal_id=bindparam("_principal"),
        label=bindparam("_label"),
        created=bindparam("_at"),
    )
)
PRINCIPAL_BY_TOKEN = Query(
    select(s.principals)
    .join(s.tokens, s.tokens.c.principal_id == s.principals.c.id)
    .where(s.tokens.c.hash == bindparam("_hash"), s.tokens.c.revoked_at.is_(None))
)
REVOKE_TOKENS = Query(
    update(s.tokens)
    .where(s.tokens.c.principal_id == bindparam("_principal"), s.tokens.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("_at"))
)

_t = s.tokens.c
TOKENS_OF = Query(
    select(_t.hash, _t.label, _t.created, _t.last_used)
    .where(_t.principal_id == bindparam("_principal"), _t.revoked_at.is_(None))
    .order_by(_t.created, _t.hash)
)
REVOKE_TOKEN = Query(
    update(s.tokens)
    .where(
        _t.principal_id == bindparam("_principal"),
        _t.hash == bindparam("_hash"),
        _t.revoked_at.is_(None),
    )
    .values(revoked_at=bindparam("_at"))
)
TOUCH_TOKEN = Query(
    update(s.tokens).where(_t.hash == bindparam("_hash")).values(last_used=bindparam("_at"))
)

# -- mail ---------------------------------------------------------------------------------------
_m = s.messages.c
BY_IDEMPOTENCY = Query(
    select(s.messages).where(
        _m.from_id == bindparam("_from"),
        _m.idempotency_key == bindparam("_idem"),
        _m.copy_of.is_(None),
    )
)
LAST_BROADCAST = Query(
    select(func.max(_m.created)).where(
        _m.from_id == bindparam("_sender"), _m.to_kind == "broadcast", _m.copy_of.is_(None)
    )
)
DUE = Query(
    select(s.messages)
    .where(_m.status.in_(OPEN_STATUSES), _m.expires_at <= bindparam("_now"))
    .order_by(_m.expires_at)
)
SUMMARY = Query(
    select(_m.status, _m.kind, func.count(), func.min(_m.created))
    .where(_m.recipient_id == bindparam("_recipient"), _m.status.in_(OPEN_STATUSES))
    .group_by(_m.status, _m.kind)
)
# The newest inbox position of a recipient (SQLite keeps the next ones in memory).
INBOX_TOP = Query(
    select(func.coalesce(func.max(_m.seq), literal_column("0", Integer))).where(
        _m.recipient_id == bindparam("_recipient")
    )
)

# -- channels -----------------------------------------------------------------------------------
_c = s.channels.c
_cm = s.channel_members.c
# A channel's members in their order.
CHANNEL_MEMBERS = Query(
    select(_cm.member_id).where(_cm.channel_id == bindparam("_channel")).order_by(_cm.position)
)
DELETE_MEMBERS = Query(delete(s.channel_members).where(_cm.channel_id == bindparam("_channel")))
INSERT_MEMBER = Query(s.channel_members.insert(), ("channel_id", "member_id", "position"))
LAST_TRIGGER = Query(
    select(_c.last_trigger_id).where(_c.id == bindparam("_channel")).with_for_update()
)
RENEW_LEASES = Query(
    update(s.tasks)
    .where(s.tasks.c.owner == bindparam("_owner"), s.tasks.c.status == "running")
    .values(lease_until=bindparam("_until"))
    .returning(s.tasks.c.id)
)
# A reply's position, taken only if its trigger is still the channel's latest, the channel is
# active and the task not cancelled: the linearisation point of supersede (C10).
CLAIM_SEQ = Query(
    update(s.channels)
    .where(
        _c.id == bindparam("_channel"),
        _c.last_trigger_id == bindparam("_trigger"),
        _c.status == "active",
        ~select(s.tasks.c.id)
        .where(s.tasks.c.id == bindparam("_task"), s.tasks.c.cancel_requested.is_(True))
        .exists(),
    )
    .values(last_seq=_c.last_seq + 1, last_activity=bindparam("_now"))
    .returning(_c.last_seq)
)

# An agent's session in a channel (one at most): read at each member's first turn of a task.
SESSION_FOR = Query(
    select(s.sessions).where(
        s.sessions.c.agent_id == bindparam("_agent"),
        s.sessions.c.channel_id == bindparam("_channel"),
    )
)


def _next_seq_stmt(*, trigger: bool) -> Any:
    values: dict[str, Any] = {"last_seq": _c.last_seq + 1, "last_activity": bindparam("_now")}
    if trigger:
        values["last_trigger_id"] = bindparam("_trigger")
    return (
        update(s.channels)
        .where(_c.id == bindparam("_channel"))
        .values(values)
        .returning(_c.last_seq)
    )


# By whether the message is a trigger.
NEXT_SEQ = {trigger: Query(_next_seq_stmt(trigger=trigger)) for trigger in (False, True)}


def _channel_rows_stmt(*, after: bool, newest: bool) -> Any:
    cm = s.channel_messages.c
    stmt = select(s.channel_messages).where(cm.channel_id == bindparam("_channel"))
    if after:
        stmt = stmt.where(cm.seq > bindparam("_after"))
    return stmt.order_by(cm.seq.desc() if newest else cm.seq).limit(bindparam("_limit"))


# A channel's messages without a byte budget, by (after a position, newest first).
CHANNEL_ROWS = {
    (after, newest): Query(_channel_rows_stmt(after=after, newest=newest))
    for after in (False, True)
    for newest in (False, True)
}


def _speaker_sources_stmt() -> Any:
    """One statement for three reads: (part, position, a, b, c) rows of the meeting channel's
    members (part 0), the newest work-channel messages (1) and the newest open mails that are not
    minutes nor the hub's own notices (2): turn notices and other bookkeeping of the hub never
    take a member's context budget."""
    cm, msg, m = s.channel_members.c, s.channel_messages.c, s.messages.c
    empty = literal_column("''", Text)
    members = select(literal_column("0", Integer), cm.position, cm.member_id, empty, empty).where(
        cm.channel_id == bindparam("_meeting_channel")
    )
    work = (
        select(msg.seq, msg.sender_id, msg.content)
        .where(msg.channel_id == bindparam("_work_channel"))
        .order_by(msg.seq.desc())
        .limit(bindparam("_latest"))
        .subquery()
    )
    mail = (
        select(m.seq, m.kind, m.subject, m.body)
        .where(
            m.recipient_id == bindparam("_agent"),
            m.status.in_(OPEN_STATUSES),
            m.kind != "minutes",
            or_(m.kind != "notice", m.from_kind != "system"),
        )
        .order_by(m.seq.desc())
        .limit(bindparam("_latest"))
        .subquery()
    )
    return union_all(
        members,
        select(literal_column("1", Integer), work.c.seq, work.c.sender_id, work.c.content, empty),
        select(literal_column("2", Integer), mail.c.seq, mail.c.kind, mail.c.subject, mail.c.body),
    )


# A meeting speaker's own context (R3), read at every speech: built once, only the columns quoted.
SPEAKER_SOURCES = Query(_speaker_sources_stmt())
# A meeting turn's counters, updated under the row's lock, and the row as it stands after.
COUNT_TURN = Query(
    update(s.meetings)
    .where(s.meetings.c.id == bindparam("_key"))
    .values(
        speeches=s.meetings.c.speeches + bindparam("_spoke"),
        turns=s.meetings.c.turns + 1,
        round=bindparam("_round"),
    )
    .returning(*s.meetings.c)
)
