"""bridge: chat-bridge places, relays, linked users and link codes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 14:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ID = sa.String(length=64)


def upgrade() -> None:
    op.create_table(
        "bridge_places",
        sa.Column("id", ID, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("worker_id", ID, nullable=True),
        sa.Column("place_id", ID, nullable=False),
        sa.Column("title", sa.String(length=200), server_default="", nullable=False),
        sa.Column("archived", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("summary_message_id", ID, nullable=True),
        sa.Column("summary_text", sa.Text(), server_default="", nullable=False),
        sa.Column("last_seq", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("bridge_places", schema=None) as batch_op:
        batch_op.create_index("ux_bridge_places_place", ["place_id"], unique=True)
        batch_op.create_index("ix_bridge_places_worker", ["worker_id"], unique=False)
    op.create_table(
        "bridge_relays",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("hub_message_id", ID, nullable=True),
        sa.Column("platform_message_id", ID, nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "bridge_links",
        sa.Column("id", ID, nullable=False),
        sa.Column("principal_id", ID, nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("bridge_links", schema=None) as batch_op:
        batch_op.create_index("ix_bridge_links_principal_id", ["principal_id"], unique=False)
    op.create_table(
        "bridge_link_codes",
        sa.Column("id", ID, nullable=False),
        sa.Column("principal_id", ID, nullable=False),
        sa.Column("expires", TS, nullable=False),
        sa.Column("used", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("bridge_link_codes")
    with op.batch_alter_table("bridge_links", schema=None) as batch_op:
        batch_op.drop_index("ix_bridge_links_principal_id")
    op.drop_table("bridge_links")
    op.drop_table("bridge_relays")
    with op.batch_alter_table("bridge_places", schema=None) as batch_op:
        batch_op.drop_index("ix_bridge_places_worker")
        batch_op.drop_index("ux_bridge_places_place")
    op.drop_table("bridge_places")
