"""Statements of the store's hot paths, built once.

Building a SQLAlchemy construct and its cache key costs more than running it on SQLite, and
these run for every message, prompt and meeting turn: each is built here at import, with bound
parameters (named ``_<what>``) for everything that varies.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, Text, bindparam, literal_column, select, union_all, update

from parley.adapters.store import schema as s
from parley.core.mail import OPEN_STATUSES

# Pending mail marked delivered, and the ids it marked. Run through SQLAlchemy, not directly:
# the id list expands (PostgreSQL has its own, ``postgres.MARK_DELIVERED``).
MARK_DELIVERED = (
    update(s.messages)
    .where(
        s.messages.c.id.in_(bindparam("_ids", expanding=True)),
        s.messages.c.status == "pending",
    )
    .values(status="delivered", delivered_at=bindparam("_at"))
    .returning(s.messages.c.id)
)

# An agent's session in a channel (one at most): read at each member's first turn of a task.
SESSION_FOR = select(s.sessions).where(
    s.sessions.c.agent_id == bindparam("_agent"), s.sessions.c.channel_id == bindparam("_channel")
)

# A channel's members in their order.
CHANNEL_MEMBERS = (
    select(s.channel_members.c.member_id)
    .where(s.channel_members.c.channel_id == bindparam("_channel"))
    .order_by(s.channel_members.c.position)
)


def _next_seq_stmt(*, trigger: bool) -> Any:
    c = s.channels.c
    values: dict[str, Any] = {"last_seq": c.last_seq + 1, "last_activity": bindparam("_now")}
    if trigger:
        values["last_trigger_id"] = bindparam("_trigger")
    return (
        update(s.channels).where(c.id == bindparam("_channel")).values(values).returning(c.last_seq)
    )


# By whether the message is a trigger.
NEXT_SEQ = {trigger: _next_seq_stmt(trigger=trigger) for trigger in (False, True)}


def _channel_rows_stmt(*, after: bool, newest: bool) -> Any:
    cm = s.channel_messages.c
    stmt = select(s.channel_messages).where(cm.channel_id == bindparam("_channel"))
    if after:
        stmt = stmt.where(cm.seq > bindparam("_after"))
    return stmt.order_by(cm.seq.desc() if newest else cm.seq).limit(bindparam("_limit"))


# A channel's messages without a byte budget, by (after a position, newest first).
CHANNEL_ROWS = {
    (after, newest): _channel_rows_stmt(after=after, newest=newest)
    for after in (False, True)
    for newest in (False, True)
}


def _speaker_sources_stmt() -> Any:
    """One statement for three reads: (part, position, a, b, c) rows of the meeting channel's
    members (part 0), the newest work-channel messages (1) and the newest open mails that are not
    minutes (2)."""
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
SPEAKER_SOURCES = _speaker_sources_stmt()
# A meeting turn's counters, updated under the row's lock, and the row as it stands after.
COUNT_TURN = (
    update(s.meetings)
    .where(s.meetings.c.id == bindparam("_key"))
    .values(
        speeches=s.meetings.c.speeches + bindparam("_spoke"),
        turns=s.meetings.c.turns + 1,
        round=bindparam("_round"),
    )
    .returning(*s.meetings.c)
)
