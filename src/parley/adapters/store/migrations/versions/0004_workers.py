"""workers: workers, their artifacts, and the parent link of child sessions

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ID = sa.String(length=64)


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent_logical_id", ID, nullable=True))
        batch_op.add_column(sa.Column("spawned_by_worker_id", ID, nullable=True))
        batch_op.add_column(sa.Column("spawn_purpose", ID, nullable=True))
        batch_op.create_index("ix_sessions_parent", ["parent_logical_id"], unique=False)
    op.create_table(
        "workers",
        sa.Column("id", ID, nullable=False),
        sa.Column("agent_id", ID, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("channel_id", ID, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("purpose", ID, nullable=False),
        sa.Column("parent_worker_id", ID, nullable=True),
        sa.Column("children_worker_ids", sa.JSON(), nullable=False),
        sa.Column("independent", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("block_parent", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("long_running", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("cancel_propagated_from", ID, nullable=True),
        sa.Column("pending_takeover_message_id", ID, nullable=True),
        sa.Column("blocked_on_message_id", ID, nullable=True),
        sa.Column("dispatch_message_id", ID, nullable=True),
        sa.Column("task_id", ID, nullable=True),
        sa.Column("trace_id", ID, nullable=False),
        sa.Column("span_id", ID, nullable=True),
        sa.Column("parent_span_id", ID, nullable=True),
        sa.Column("created_by", ID, nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.Column("updated", TS, nullable=False),
        sa.Column("last_heartbeat", TS, nullable=False),
        sa.Column("ended", TS, nullable=True),
        sa.Column("end_reason", ID, nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("owner", ID, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.create_index("ix_workers_parent", ["parent_worker_id"], unique=False)
        batch_op.create_index("ix_workers_session", ["session_id"], unique=False)
        batch_op.create_index("ix_workers_channel", ["channel_id"], unique=False)
        batch_op.create_index("ix_workers_state", ["state"], unique=False)
    op.create_table(
        "worker_artifacts",
        sa.Column("id", ID, nullable=False),
        sa.Column("worker_id", ID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("worker_artifacts", schema=None) as batch_op:
        batch_op.create_index("ix_worker_artifacts_worker_id", ["worker_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("worker_artifacts", schema=None) as batch_op:
        batch_op.drop_index("ix_worker_artifacts_worker_id")
    op.drop_table("worker_artifacts")
    with op.batch_alter_table("workers", schema=None) as batch_op:
        for index in ("ix_workers_state", "ix_workers_channel", "ix_workers_session"):
            batch_op.drop_index(index)
        batch_op.drop_index("ix_workers_parent")
    op.drop_table("workers")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_sessions_parent")
        for column in ("spawn_purpose", "spawned_by_worker_id", "parent_logical_id"):
            batch_op.drop_column(column)
