"""speech timings: how long each meeting speech waited on its runtime (the turn timeline)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 19:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: speeches recorded before this revision have no timings.
    with op.batch_alter_table("speeches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("timings", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("speeches", schema=None) as batch_op:
        batch_op.drop_column("timings")
