"""The relational schema, shared by SQLite and PostgreSQL. Migrations live in ``migrations/``."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

metadata = MetaData()

TS = DateTime(timezone=True)

principals = Table(
    "principals",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("role", String(16), nullable=False, server_default="member"),
    Column("display_name", String(200), nullable=False),
    Column("workspace", Text),
    Column("persona", Text, nullable=False, server_default=""),
    Column("runtime", JSON, nullable=False),
    Column("work_channel_id", String(64)),
    # False once archived: its tokens no longer authenticate and it is listed nowhere.
    Column("active", Boolean, nullable=False, server_default=text("true")),
    # A disabled agent keeps its mail and tokens but is given no turns.
    Column("disabled", Boolean, nullable=False, server_default=text("false")),
    Column("created", TS, nullable=False),
    # Per-inbox sequence: incremented under the row lock when mail is delivered to this
    # principal, so an inbox has one gapless commit order (M6) on both stores.
    Column("inbox_seq", Integer, nullable=False, server_default="0"),
    # Who may add this agent to channels without an invitation (core/consent.py).
    Column("accepts_channels_from", JSON, nullable=False, server_default=text("'[]'")),
)

tokens = Table(
    "tokens",
    metadata,
    Column("hash", String(64), primary_key=True),
    Column("principal_id", String(64), nullable=False, index=True),
    Column("label", String(200), nullable=False, server_default=""),
    Column("created", TS, nullable=False),
    Column("revoked_at", TS),
    # Written at most once a minute per token (service/identity.py), not on every request.
    Column("last_used", TS),
)

events = Table(
    "events",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("type", String(80), nullable=False),
    Column("time", TS, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("subject", String(120), nullable=False),
    Column("trace_id", String(64)),
    Column("span_id", String(64)),
    Column("parent_span_id", String(64)),
    Column("payload", JSON, nullable=False),
    Column("hub_id", String(32)),
    Index("ix_events_subject", "subject"),
    Index("ix_events_type", "type"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("created", TS, nullable=False),
    Column("ttl_seconds", Integer, nullable=False),
    Column("expires_at", TS, nullable=False),
    Column("from_kind", String(16), nullable=False),
    Column("from_id", String(64), nullable=False),
    Column("to_kind", String(16), nullable=False),
    Column("to_id", String(64), nullable=False),
    Column("recipient_id", String(64), nullable=False),
    Column("cc", JSON, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("subject", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("payload", JSON, nullable=False),
    Column("parent_message_id", String(64)),
    Column("correlation_id", String(200)),
    Column("related", JSON, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("delivered_at", TS),
    Column("read_at", TS),
    Column("consumed_at", TS),
    Column("closed_at", TS),
    Column("failure_reason", Text),
    Column("idempotency_key", String(200)),
    Column("archive_label", String(200)),
    Column("copy_of", String(64)),
    Column("copy_reason", String(16)),
    Column("seq", Integer, nullable=False),
    Index("ux_messages_inbox_seq", "recipient_id", "seq", unique=True),
    Index(
        "ux_messages_idempotency",
        "from_id",
        "idempotency_key",
        unique=True,
        sqlite_where=text("idempotency_key IS NOT NULL AND copy_of IS NULL"),
        postgresql_where=text("idempotency_key IS NOT NULL AND copy_of IS NULL"),
    ),
    Index("ix_messages_status_expiry", "status", "expires_at"),
    Index("ix_messages_sender", "from_id", "to_kind", "created"),
    Index("ix_messages_correlation", "correlation_id"),
    Index("ix_messages_parent", "parent_message_id"),
    Index("ix_messages_copy_of", "copy_of"),
)

channels = Table(
    "channels",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("private", Boolean, nullable=False, server_default=text("false")),
    Column("created_by", String(64), nullable=False),
    Column("created", TS, nullable=False),
    Column("status", String(16), nullable=False),
    Column("discussion_rounds", Integer, nullable=False),
    Column("turn_timeout_s", Float, nullable=False),
    Column("missed_turn_policy", String(16), nullable=False),
    Column("owner_agent_id", String(64)),
    Column("metadata", JSON, nullable=False),
    # Per-channel sequence and the latest user (trigger) message: both change under the channel
    # row lock, which is what makes supersede's check-and-append one atomic step (C10).
    Column("last_seq", Integer, nullable=False, server_default="0"),
    Column("last_trigger_id", String(64)),
    Column("last_activity", TS),
)

channel_members = Table(
    "channel_members",
    metadata,
    Column("channel_id", String(64), primary_key=True),
    Column("member_id", String(64), primary_key=True),
    Column("position", Integer, nullable=False),
    Index("ix_channel_members_member", "member_id"),
)

channel_messages = Table(
    "channel_messages",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("channel_id", String(64), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("sender_id", String(64), nullable=False),
    Column("sender_kind", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("reply_to", String(64)),
    Column("trigger_id", String(64)),
    Column("task_id", String(64)),
    Column("round", Integer),
    Column("metadata", JSON, nullable=False),
    Column("created", TS, nullable=False),
    Index("ux_channel_messages_seq", "channel_id", "seq", unique=True),
)

invitations = Table(
    "invitations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("channel_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("invited_by", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("created", TS, nullable=False),
    Column("decided", TS),
    Index("ix_invitations_agent_status", "agent_id", "status"),
    Index("ix_invitations_channel", "channel_id"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("agent_id", String(64), nullable=False),
    Column("channel_id", String(64), nullable=False),
    Column("display_name", String(200), nullable=False),
    Column("runtime_state", JSON, nullable=False),
    Column("model_override", String(64)),
    Column("created", TS, nullable=False),
    Column("parent_logical_id", String(64)),
    Column("spawned_by_worker_id", String(64)),
    Column("spawn_purpose", String(64)),
    Index("ux_sessions_agent_channel", "agent_id", "channel_id", unique=True),
    Index("ix_sessions_parent", "parent_logical_id"),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("channel_id", String(64), nullable=False, index=True),
    Column("trigger_id", String(64), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("end_reason", String(16)),
    Column("members", JSON, nullable=False),
    Column("rounds", Integer, nullable=False),
    Column("current_round", Integer, nullable=False, server_default="0"),
    Column("calls", Integer, nullable=False, server_default="0"),
    Column("accepted", Integer, nullable=False, server_default="0"),
    Column("failed_member", String(64)),
    Column("error", Text),
    Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
    Column("owner", String(64)),
    Column("lease_until", TS),
    Column("created", TS, nullable=False),
    Column("finished", TS),
    Index("ix_tasks_status", "status"),
)

invocations = Table(
    "invocations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("task_id", String(64), index=True),
    Column("channel_id", String(64), nullable=False),
    Column("trigger_id", String(64)),
    Column("round", Integer),
    Column("agent_id", String(64), nullable=False),
    Column("prompt_first_id", String(64)),
    Column("prompt_last_id", String(64)),
    Column("prompt_chars", Integer, nullable=False),
    Column("model_route", String(300), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", String(64)),
    Column("message_id", String(64)),
    Column("timings", JSON, nullable=False),
    Column("created", TS, nullable=False),
)

pending_turns = Table(
    "pending_turns",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("agent_id", String(64), nullable=False),
    Column("channel_id", String(64), nullable=False),
    Column("task_id", String(64)),
    Column("round", Integer),
    Column("prompt", JSON, nullable=False),
    Column("deadline", TS, nullable=False),
    Column("status", String(16), nullable=False),
    Column("answer", Text),
    Column("created", TS, nullable=False),
    Index("ix_pending_turns_agent_status", "agent_id", "status"),
)

rooms = Table(
    "rooms",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("created_by", String(64), nullable=False),
    Column("created", TS, nullable=False),
    Column("config", JSON, nullable=False),
)

room_members = Table(
    "room_members",
    metadata,
    # The key is the agent's id: an agent belongs to at most one room (room_membership_exclusive).
    Column("id", String(64), primary_key=True),
    Column("agent_id", String(64), nullable=False),
    Column("room_id", String(64), nullable=False),
    Column("session_id", String(64), nullable=False),
    Column("workspace", Text),
    Column("state", String(16), nullable=False),
    Column("state_before", String(16)),
    Column("meeting_id", String(64)),
    Column("joined", TS, nullable=False),
    Column("last_activity", TS),
    Index("ix_room_members_room", "room_id"),
)

meetings = Table(
    "meetings",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("room_id", String(64), nullable=False),
    Column("channel_id", String(64), nullable=False),
    Column("topic", Text, nullable=False),
    Column("convened_by", String(64), nullable=False),
    Column("moderator_route", String(300), nullable=False, server_default=""),
    Column("status", String(16), nullable=False),
    Column("end_reason", String(16)),
    Column("error", Text),
    Column("round", Integer, nullable=False, server_default="0"),
    Column("max_rounds", Integer, nullable=False),
    Column("speeches", Integer, nullable=False, server_default="0"),
    Column("turns", Integer, nullable=False, server_default="0"),
    Column("attendees", JSON, nullable=False),
    Column("stop_requested", Boolean, nullable=False, server_default=text("false")),
    Column("owner", String(64)),
    Column("created", TS, nullable=False),
    Column("ended", TS),
    Index("ix_meetings_room", "room_id"),
    Index("ix_meetings_status", "status"),
)

speeches = Table(
    "speeches",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("meeting_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("round", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("chars", Integer, nullable=False),
    Column("runtime", String(32), nullable=False),
    Column("model_route", String(300), nullable=False),
    Column("message_id", String(64)),
    Column("reason", Text),
    Column("created", TS, nullable=False),
    Column("timings", JSON),
    Index("ix_speeches_meeting", "meeting_id"),
)

minutes = Table(
    "minutes",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("meeting_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("runtime", String(32), nullable=False),
    Column("model_route", String(300), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("reason", Text),
    Column("mail_id", String(64)),
    Column("created", TS, nullable=False),
    Index("ux_minutes_meeting_agent", "meeting_id", "agent_id", unique=True),
)

briefs = Table(
    "briefs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("room_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("text", Text, nullable=False),
    Column("fingerprint", String(32), nullable=False),
    Column("created", TS, nullable=False),
    Index("ix_briefs_room_agent", "room_id", "agent_id"),
)

pulse_log = Table(
    "pulse_log",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("room_id", String(64), nullable=False),
    Column("conclusion", Text, nullable=False),
    Column("escalated", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("signals", JSON, nullable=False),
    Column("meeting_id", String(64)),
    Column("created", TS, nullable=False),
    Index("ix_pulse_log_room", "room_id"),
)

workers = Table(
    "workers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("agent_id", String(64), nullable=False),
    Column("session_id", String(64), nullable=False),
    Column("channel_id", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("purpose", String(64), nullable=False),
    Column("parent_worker_id", String(64)),
    Column("children_worker_ids", JSON, nullable=False),
    Column("independent", Boolean, nullable=False, server_default=text("false")),
    Column("block_parent", Boolean, nullable=False, server_default=text("false")),
    Column("long_running", Boolean, nullable=False, server_default=text("false")),
    Column("cancel_propagated_from", String(64)),
    Column("pending_takeover_message_id", String(64)),
    Column("blocked_on_message_id", String(64)),
    Column("dispatch_message_id", String(64)),
    Column("task_id", String(64)),
    Column("trace_id", String(64), nullable=False),
    Column("span_id", String(64)),
    Column("parent_span_id", String(64)),
    Column("created_by", String(64), nullable=False),
    Column("created", TS, nullable=False),
    Column("updated", TS, nullable=False),
    Column("last_heartbeat", TS, nullable=False),
    Column("ended", TS),
    Column("end_reason", String(64)),
    Column("result", JSON),
    Column("owner", String(64)),
    Index("ix_workers_parent", "parent_worker_id"),
    Index("ix_workers_session", "session_id"),
    Index("ix_workers_channel", "channel_id"),
    Index("ix_workers_state", "state"),
)

worker_artifacts = Table(
    "worker_artifacts",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("worker_id", String(64), nullable=False, index=True),
    Column("name", String(200), nullable=False),
    Column("content", Text, nullable=False),
    Column("created", TS, nullable=False),
)

# The chat bridge (core/bridge.py): hub channels mirrored on a platform, the relays made (one
# row per dedupe key, so a replay after a restart is recognised) and linked platform users.
bridge_places = Table(
    "bridge_places",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("worker_id", String(64)),
    Column("place_id", String(64), nullable=False),
    Column("title", String(200), nullable=False, server_default=""),
    Column("archived", Boolean, nullable=False, server_default=text("false")),
    Column("summary_message_id", String(64)),
    Column("summary_text", Text, nullable=False, server_default=""),
    Column("last_seq", Integer, nullable=False, server_default="0"),
    Column("created", TS, nullable=False),
    Index("ux_bridge_places_place", "place_id", unique=True),
    Index("ix_bridge_places_worker", "worker_id"),
)

bridge_relays = Table(
    "bridge_relays",
    metadata,
    Column("id", String(100), primary_key=True),
    Column("hub_message_id", String(64)),
    Column("platform_message_id", String(64)),
    Column("created", TS, nullable=False),
)

bridge_links = Table(
    "bridge_links",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("principal_id", String(64), nullable=False, index=True),
    Column("created", TS, nullable=False),
)

bridge_link_codes = Table(
    "bridge_link_codes",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("principal_id", String(64), nullable=False),
    Column("expires", TS, nullable=False),
    Column("used", Boolean, nullable=False, server_default=text("false")),
    Column("created", TS, nullable=False),
)

# -- token and cost accounting (0007) ------------------------------------------------------------
turn_usage = Table(
    "turn_usage",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("agent_id", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("runtime", String(32), nullable=False),
    Column("input_tokens", Integer, nullable=False, server_default="0"),
    Column("output_tokens", Integer, nullable=False, server_default="0"),
    Column("cache_read_tokens", Integer, nullable=False, server_default="0"),
    Column("cache_write_tokens", Integer, nullable=False, server_default="0"),
    Column("cost_usd", Float),
    Column("channel_id", String(64)),
    Column("discussion_id", String(64)),
    Column("meeting_id", String(64)),
    Column("task_id", String(64)),
    Column("worker_id", String(64)),
    Column("worker_tree", String(64)),
    Column("day", String(10), nullable=False),
    Column("created", TS, nullable=False),
    Index("ix_turn_usage_agent", "agent_id"),
    Index("ix_turn_usage_tree", "worker_tree"),
    Index("ix_turn_usage_day", "day"),
)

usage_budgets = Table(
    "usage_budgets",
    metadata,
    Column("id", String(140), primary_key=True),
    Column("scope", String(16), nullable=False),
    Column("key", String(64), nullable=False),
    Column("max_tokens", Integer),
    Column("max_cost_usd", Float),
    Column("created_by", String(64), nullable=False),
    Column("created", TS, nullable=False),
)
# The full-text indexes of mail (subject, body) and channel messages (content) are made by
# migration 0007 outside this metadata: an FTS5 table kept by triggers on SQLite, an expression
# GIN index on PostgreSQL (``adapters/store/search.py`` queries them).

runtime_processes = Table(
    "runtime_processes",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("hub_id", String(64), nullable=False, index=True),
    Column("host", String(300), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("pgid", Integer, nullable=False),
    Column("start_time", Float, nullable=False),
    Column("agent_pid", Integer, nullable=False),
    Column("command", String(200), nullable=False),
    Column("created", TS, nullable=False),
)
