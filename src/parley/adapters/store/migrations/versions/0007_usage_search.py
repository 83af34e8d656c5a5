"""usage and search: per-turn token and cost records, budgets, full-text indexes

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 18:30:00.000000

The full-text indexes: on SQLite two FTS5 tables (each row's id and text), filled from the
rows that exist, with the newest row indexed noted in ``search_progress``: rows stored later are
indexed by the next search (``adapters/store/search.py``), so storing a message pays nothing
for search; deleting or editing a row's text updates its index row by trigger; on
PostgreSQL a GIN index over each table's ``tsvector`` expression, which PostgreSQL keeps itself
and builds over the existing rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ID = sa.String(length=64)

# (FTS table, content table, indexed columns)
_SQLITE_FTS = (
    ("mail_fts", "messages", ("subject", "body")),
    ("channel_fts", "channel_messages", ("content",)),
)
_PG_INDEXES = (
    ("ix_messages_fts", "messages", "subject || ' ' || body"),
    ("ix_channel_messages_fts", "channel_messages", "content"),
)


def _sqlite_fts_up() -> None:
    # Each FTS5 table holds its own copy of the text with the row's id: an external-content
    # table would key on the rowid, which a VACUUM may renumber in a table without an INTEGER
    # PRIMARY KEY. Search matches words and word prefixes only (no phrases, no ranking), so the
    # index keeps no positions (detail=none) and no column sizes. No trigger indexes a new
    # row: a message is stored without paying for search (a fifth of mail's throughput when
    # it did), and the next search indexes what was stored since the last one.
    op.execute(
        "CREATE TABLE search_progress (name VARCHAR(64) PRIMARY KEY, "
        "last_rowid INTEGER NOT NULL, last_id VARCHAR(64))"
    )
    for fts, table, columns in _SQLITE_FTS:
        cols = ", ".join(columns)
        new = ", ".join(f"new.{c}" for c in columns)
        op.execute(
            f"CREATE VIRTUAL TABLE {fts} USING fts5(id UNINDEXED, {cols}, "
            "tokenize='unicode61 remove_diacritics 2', detail=none, columnsize=0)"
        )
        op.execute(
            f"CREATE TRIGGER {fts}_ad AFTER DELETE ON {table} BEGIN "
            f"DELETE FROM {fts} WHERE id = old.id; END"
        )
        op.execute(
            # Only a row already indexed: one stored since the last search is indexed, with
            # its text as it is then, by the next.
            f"CREATE TRIGGER {fts}_au AFTER UPDATE OF {cols} ON {table} "
            f"WHEN old.rowid <= (SELECT last_rowid FROM search_progress WHERE name = '{fts}') "
            "BEGIN "
            f"DELETE FROM {fts} WHERE id = old.id; "
            f"INSERT INTO {fts}(id, {cols}) VALUES (new.id, {new}); END"
        )
        # The rows stored before this migration, and where the next search goes on from.
        op.execute(f"INSERT INTO {fts}(id, {cols}) SELECT id, {cols} FROM {table}")
        op.execute(
            f"INSERT INTO search_progress(name, last_rowid, last_id) "
            f"SELECT '{fts}', coalesce(max(rowid), 0), NULL FROM {table}"
        )
        op.execute(
            f"UPDATE search_progress SET last_id = "
            f"(SELECT id FROM {table} WHERE rowid = search_progress.last_rowid) "
            f"WHERE name = '{fts}'"
        )


def _sqlite_fts_down() -> None:
    for fts, _table, _columns in _SQLITE_FTS:
        for suffix in ("ai", "ad", "au"):
            op.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
        op.execute(f"DROP TABLE IF EXISTS {fts}")
    op.execute("DROP TABLE IF EXISTS search_progress")


def upgrade() -> None:
    op.create_table(
        "turn_usage",
        sa.Column("id", ID, nullable=False),
        sa.Column("agent_id", ID, nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("runtime", sa.String(length=32), nullable=False),
        sa.Column("input_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("output_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("cache_read_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("channel_id", ID, nullable=True),
        sa.Column("discussion_id", ID, nullable=True),
        sa.Column("meeting_id", ID, nullable=True),
        sa.Column("task_id", ID, nullable=True),
        sa.Column("worker_id", ID, nullable=True),
        sa.Column("worker_tree", ID, nullable=True),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("turn_usage", schema=None) as batch_op:
        batch_op.create_index("ix_turn_usage_agent", ["agent_id"], unique=False)
        batch_op.create_index("ix_turn_usage_tree", ["worker_tree"], unique=False)
        batch_op.create_index("ix_turn_usage_day", ["day"], unique=False)
    op.create_table(
        "usage_budgets",
        sa.Column("id", sa.String(length=140), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("key", ID, nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("max_cost_usd", sa.Float(), nullable=True),
        sa.Column("created_by", ID, nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_fts_up()
    else:
        for name, table, expression in _PG_INDEXES:
            op.execute(
                f"CREATE INDEX {name} ON {table} USING gin (to_tsvector('simple', {expression}))"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_fts_down()
    else:
        for name, _table, _expression in _PG_INDEXES:
            op.execute(f"DROP INDEX IF EXISTS {name}")
    op.drop_table("usage_budgets")
    with op.batch_alter_table("turn_usage", schema=None) as batch_op:
        batch_op.drop_index("ix_turn_usage_day")
        batch_op.drop_index("ix_turn_usage_tree")
        batch_op.drop_index("ix_turn_usage_agent")
    op.drop_table("turn_usage")
