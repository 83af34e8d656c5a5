"""runtime processes: the record of each live supervised command-line agent

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 18:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ID = sa.String(length=64)


def upgrade() -> None:
    op.create_table(
        "runtime_processes",
        sa.Column("id", ID, nullable=False),
        sa.Column("hub_id", ID, nullable=False),
        sa.Column("host", sa.String(length=300), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("pgid", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.Float(), nullable=False),
        sa.Column("agent_pid", sa.Integer(), nullable=False),
        sa.Column("command", sa.String(length=200), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runtime_processes", schema=None) as batch_op:
        batch_op.create_index("ix_runtime_processes_hub_id", ["hub_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runtime_processes", schema=None) as batch_op:
        batch_op.drop_index("ix_runtime_processes_hub_id")
    op.drop_table("runtime_processes")
