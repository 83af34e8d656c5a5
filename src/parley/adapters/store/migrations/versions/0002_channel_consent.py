"""channel membership consent: agents' allow-lists and invitations

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing agents consent to nobody: the secure default, the same as a new agent's.
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "accepts_channels_from",
                sa.JSON(),
                server_default=sa.text("'[]'"),
                nullable=False,
            )
        )

    op.create_table(
        "invitations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("channel_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("invited_by", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("invitations", schema=None) as batch_op:
        batch_op.create_index("ix_invitations_agent_status", ["agent_id", "status"], unique=False)
        batch_op.create_index("ix_invitations_channel", ["channel_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("invitations", schema=None) as batch_op:
        batch_op.drop_index("ix_invitations_channel")
        batch_op.drop_index("ix_invitations_agent_status")

    op.drop_table("invitations")
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("accepts_channels_from")
