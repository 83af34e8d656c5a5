"""cluster: the hub that produced each event

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 14:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Several hubs may share one PostgreSQL database (P2): the log says which one acted.
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hub_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_column("hub_id")
