"""lifecycle: disabled agents, and when each token was last used

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 18:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing agents stay enabled; an archived principal is one that is no longer active.
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("disabled", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
    # Unknown for existing tokens until their next use.
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_used", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("last_used")
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("disabled")
