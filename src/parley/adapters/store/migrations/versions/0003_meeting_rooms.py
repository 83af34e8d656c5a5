"""meeting rooms: rooms, members, meetings, speeches, minutes, briefs, pulse log

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "rooms",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    # The key is the agent's id: an agent belongs to at most one room.
    op.create_table(
        "room_members",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("room_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("workspace", sa.Text(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_before", sa.String(length=16), nullable=True),
        sa.Column("meeting_id", sa.String(length=64), nullable=True),
        sa.Column("joined", TS, nullable=False),
        sa.Column("last_activity", TS, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("room_members", schema=None) as batch_op:
        batch_op.create_index("ix_room_members_room", ["room_id"], unique=False)

    op.create_table(
        "meetings",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("room_id", sa.String(length=64), nullable=False),
        sa.Column("channel_id", sa.String(length=64), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("convened_by", sa.String(length=64), nullable=False),
        sa.Column("moderator_route", sa.String(length=300), server_default="", nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("end_reason", sa.String(length=16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("round", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_rounds", sa.Integer(), nullable=False),
        sa.Column("speeches", sa.Integer(), server_default="0", nullable=False),
        sa.Column("turns", sa.Integer(), server_default="0", nullable=False),
        sa.Column("attendees", sa.JSON(), nullable=False),
        sa.Column("stop_requested", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.Column("ended", TS, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("meetings", schema=None) as batch_op:
        batch_op.create_index("ix_meetings_room", ["room_id"], unique=False)
        batch_op.create_index("ix_meetings_status", ["status"], unique=False)

    op.create_table(
        "speeches",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("meeting_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("runtime", sa.String(length=32), nullable=False),
        sa.Column("model_route", sa.String(length=300), nullable=False),
        sa.Column("message_id", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("speeches", schema=None) as batch_op:
        batch_op.create_index("ix_speeches_meeting", ["meeting_id"], unique=False)

    op.create_table(
        "minutes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("meeting_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("runtime", sa.String(length=32), nullable=False),
        sa.Column("model_route", sa.String(length=300), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("mail_id", sa.String(length=64), nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("minutes", schema=None) as batch_op:
        batch_op.create_index("ux_minutes_meeting_agent", ["meeting_id", "agent_id"], unique=True)

    op.create_table(
        "briefs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("room_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("briefs", schema=None) as batch_op:
        batch_op.create_index("ix_briefs_room_agent", ["room_id", "agent_id"], unique=False)

    op.create_table(
        "pulse_log",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("room_id", sa.String(length=64), nullable=False),
        sa.Column("conclusion", sa.Text(), nullable=False),
        sa.Column("escalated", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("signals", sa.JSON(), nullable=False),
        sa.Column("meeting_id", sa.String(length=64), nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("pulse_log", schema=None) as batch_op:
        batch_op.create_index("ix_pulse_log_room", ["room_id"], unique=False)


def downgrade() -> None:
    for table, indexes in (
        ("pulse_log", ["ix_pulse_log_room"]),
        ("briefs", ["ix_briefs_room_agent"]),
        ("minutes", ["ux_minutes_meeting_agent"]),
        ("speeches", ["ix_speeches_meeting"]),
        ("meetings", ["ix_meetings_status", "ix_meetings_room"]),
        ("room_members", ["ix_room_members_room"]),
        ("rooms", []),
    ):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for index in indexes:
                batch_op.drop_index(index)
        op.drop_table(table)
