"""Full-text search statements: FTS5 on SQLite, ``tsvector`` on PostgreSQL (migration 0007).

Both take the query's words (``core.search.terms``: letters and digits only, so nothing of the
index's own query syntax) and match every word as a prefix. The caller's visibility is part of
the statement, by the same rules as a read (``core/search.py``), so a page of hits is never
thinned after the limit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Integer,
    String,
    and_,
    column,
    exists,
    literal_column,
    or_,
    select,
    table,
    text,
)

from parley.adapters.store import schema as s
from parley.core.search import SearchQuery

_MAIL_FTS = table("mail_fts", column("id"))
_CHANNEL_FTS = table("channel_fts", column("id"))
_MAIL_VECTOR = "to_tsvector('simple', messages.subject || ' ' || messages.body)"
_CHANNEL_VECTOR = "to_tsvector('simple', channel_messages.content)"


def _fts5_match(words: list[str]) -> str:
    # Each word quoted (a word is letters and digits) and taken as a prefix; all must occur.
    return " ".join(f'"{w}"*' for w in words)


def _tsquery(words: list[str]) -> str:
    return " & ".join(f"{w}:*" for w in words)


def mail_statement(dialect: str, query: SearchQuery, words: list[str], viewer: str | None) -> Any:
    """The mail matching ``query`` that ``viewer`` may read (every mail for None)."""
    m = s.messages.c
    base: Any = s.messages
    where: list[Any] = []
    if words:
        if dialect == "sqlite":
            base = base.join(_MAIL_FTS, _MAIL_FTS.c.id == m.id)
            where.append(literal_column("mail_fts").op("MATCH")(_fts5_match(words)))
        else:
            where.append(
                text(f"{_MAIL_VECTOR} @@ to_tsquery('simple', :mail_q)").bindparams(
                    mail_q=_tsquery(words)
                )
            )
    if viewer is not None:
        where.append(or_(m.recipient_id == viewer, and_(m.from_id == viewer, m.copy_of.is_(None))))
    if query.sender:
        where.append(m.from_id == query.sender)
    if query.kind:
        where.append(m.kind == query.kind)
    if query.channel_id:
        where.append(and_(m.to_kind == "channel", m.to_id == query.channel_id))
    if query.since is not None:
        where.append(m.created >= query.since)
    if query.until is not None:
        where.append(m.created < query.until)
    return (
        select(
            m.id,
            m.from_id,
            m.recipient_id,
            m.kind,
            m.subject,
            m.body,
            m.created,
            m.to_kind,
            m.to_id,
        )
        .select_from(base)
        .where(*where)
        .order_by(m.created.desc(), m.id.desc())
        .limit(query.limit)
    )


def channel_statement(
    dialect: str, query: SearchQuery, words: list[str], viewer: str | None
) -> Any:
    """The channel messages matching ``query`` in channels ``viewer`` may see."""
    cm = s.channel_messages.c
    c = s.channels.c
    base: Any = s.channel_messages.join(s.channels, c.id == cm.channel_id)
    where: list[Any] = [c.status != "deleted"]
    if words:
        if dialect == "sqlite":
            base = base.join(_CHANNEL_FTS, _CHANNEL_FTS.c.id == cm.id)
            where.append(literal_column("channel_fts").op("MATCH")(_fts5_match(words)))
        else:
            where.append(
                text(f"{_CHANNEL_VECTOR} @@ to_tsquery('simple', :channel_q)").bindparams(
                    channel_q=_tsquery(words)
                )
            )
    if viewer is not None:
        member = s.channel_members.c
        where.append(
            or_(
                c.created_by == viewer,
                c.owner_agent_id == viewer,
                exists().where(member.channel_id == c.id, member.member_id == viewer),
            )
        )
    if query.sender:
        where.append(cm.sender_id == query.sender)
    if query.kind:
        where.append(c.kind == query.kind)
    if query.channel_id:
        where.append(cm.channel_id == query.channel_id)
    if query.since is not None:
        where.append(cm.created >= query.since)
    if query.until is not None:
        where.append(cm.created < query.until)
    return (
        select(cm.id, cm.sender_id, cm.channel_id, c.kind, c.name, cm.content, cm.created)
        .select_from(base)
        .where(*where)
        .order_by(cm.created.desc(), cm.id.desc())
        .limit(query.limit)
    )


# -- SQLite: rows stored since the last search are indexed by the next ---------------------------
# (FTS table, content table, indexed columns), as migration 0007 made them.
SQLITE_INDEXES = (
    ("mail_fts", "messages", "subject, body"),
    ("channel_fts", "channel_messages", "content"),
)


async def catch_up(tx: Any) -> int:
    """Index the rows stored since the index was last brought up to date, in the write
    transaction ``tx`` (a ``SqlTx`` on SQLite); the number of rows indexed.

    A row's place in its table is its rowid, which grows as rows are stored. ``search_progress``
    holds the newest row indexed, by rowid and id: when that row is no longer at that rowid (a
    VACUUM renumbered the table, or the row was deleted, after which a new row may take its
    rowid), the index is made anew, which is rare and always right."""
    indexed = 0
    for fts, table_name, cols in SQLITE_INDEXES:
        progress = (
            await tx.execute(
                text("SELECT last_rowid, last_id FROM search_progress WHERE name = :name").columns(
                    column("last_rowid", Integer), column("last_id", String)
                ),
                {"name": fts},
            )
        ).mapping()
        last_rowid = int(progress["last_rowid"]) if progress else 0
        last_id = progress["last_id"] if progress else None
        if last_id is not None:
            at = (
                await tx.execute(
                    text(f"SELECT rowid FROM {table_name} WHERE id = :id").columns(
                        column("rowid", Integer)
                    ),
                    {"id": last_id},
                )
            ).scalar()
            if at != last_rowid:
                await tx.execute(text(f"DELETE FROM {fts}"))
                last_rowid = 0
        top = (
            await tx.execute(
                text(f"SELECT rowid, id FROM {table_name} ORDER BY rowid DESC LIMIT 1").columns(
                    column("rowid", Integer), column("id", String)
                )
            )
        ).mapping()
        if top is None or int(top["rowid"]) == last_rowid:
            continue
        added = await tx.execute(
            text(
                f"INSERT INTO {fts}(id, {cols}) SELECT id, {cols} FROM {table_name} "
                "WHERE rowid > :after AND rowid <= :upto"
            ),
            {"after": last_rowid, "upto": int(top["rowid"])},
        )
        indexed += added.rowcount
        await tx.execute(
            text(
                "INSERT INTO search_progress(name, last_rowid, last_id) "
                "VALUES (:name, :rowid, :id) ON CONFLICT(name) DO UPDATE SET "
                "last_rowid = excluded.last_rowid, last_id = excluded.last_id"
            ),
            {"name": fts, "rowid": int(top["rowid"]), "id": top["id"]},
        )
    return indexed
