"""The limits and timings of a running hub: what the service layer and the surfaces enforce.

A plain pydantic model, so that the service takes its settings as a value. Where they come from
(the environment, ``PARLEY_<NAME>``) and what only the composition root needs (the data root, the
database URL, the listening address, credentials) is :class:`parley.config.Settings`, which
extends this model.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class HubSettings(BaseModel):
    """Every limit and interval a hub runs with; each has its default here."""

    broadcast_interval_s: float = Field(default=60.0, ge=0)
    expiry_sweep_s: float = Field(default=5.0, gt=0)
    discussion_stale_s: float = Field(default=1800.0, gt=0)
    stale_sweep_s: float = Field(default=30.0, gt=0)
    room_pulse_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds between scheduled pulses of every room (stall check, board "
        "broadcast, escalation to a meeting); 0: off, pulse only on request.",
    )
    rooms_per_principal: int = Field(
        default=100,
        ge=0,
        description="Rooms one agent or human may have created and not deleted; one more is "
        "refused (room_limit_reached) until it deletes one. The operator is not limited. "
        "0: no limit.",
    )
    channels_per_principal: int = Field(
        default=500,
        ge=0,
        description="Open group, direct and discussion channels one agent or human may have "
        "created; one more is refused (channel_limit_reached) until it deletes a group or "
        "finishes a discussion. The operator is not limited. 0: no limit.",
    )
    turn_timeout_s: float = Field(default=120.0, gt=0)
    lease_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a hub's hold (lease) on a running discussion lasts unless renewed; "
        "it is renewed every third of that. With several hubs on one PostgreSQL, another hub "
        "takes over a discussion whose lease ran out.",
    )
    lease_sweep_s: float = Field(
        default=5.0,
        gt=0,
        description="Seconds between two looks (PostgreSQL) for discussions and meetings whose "
        "hub died or whose lease ran out, to take them over.",
    )
    worker_stale_after_s: float = Field(
        default=1500.0,
        gt=0,
        description="Seconds without a heartbeat after which a running or idle worker is stale "
        "(W6), unless a takeover is pending or it is marked long-running.",
    )
    worker_health_sweep_s: float = Field(
        default=60.0,
        ge=0,
        description="Seconds between health sweeps of workers; 0 turns them off.",
    )
    worker_result_budget_tokens: int = Field(
        default=2000,
        ge=1,
        description="Largest task-result summary handed to a parent inline, in tokens (about four "
        "characters each); a longer one is stored as an artifact and the parent gets a reference.",
    )
    worker_max_depth: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Deepest a worker may sit below its root worker (a root is 0, its children "
        "1); a spawn whose child would sit deeper is refused (worker_too_deep). A tree view "
        "nests at most this deep: a worker below that (a tree made before the limit) is shown "
        "as a root of its own that names its parent.",
    )
    worker_max_children: int = Field(
        default=64,
        ge=1,
        description="Unfinished children one worker may have at once; another spawn is refused "
        "(worker_too_many_children) until one of them ends. Finished children do not count.",
    )
    payload_max_bytes: int = Field(
        default=64 * 1024, ge=1, description="Largest mail payload, in bytes of its JSON encoding."
    )
    message_max_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="Largest mail message (all its fields) or channel post, in UTF-8 bytes.",
    )
    send_rate_per_minute: int = Field(
        default=600,
        ge=0,
        description="Messages and posts one sender may store a minute; 0: no limit.",
    )
    send_bytes_per_minute: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        description="Bytes one sender may store a minute, every copy counted; 0: no limit.",
    )
    page_max_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="A page of a list or stream backfill takes no more rows once this full.",
    )
    request_max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1,
        description="Largest request body the hub reads, in bytes (413 above it); room for a "
        "mailroom import of a few thousand messages.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest pause, in seconds, between two parts of a request body (then 408).",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Open connections the server accepts before it answers 503.",
    )
    mcp_sessions_per_principal: int = Field(
        default=16,
        ge=1,
        description="MCP sessions one principal may hold open at once, over every profile. One "
        "more closes the principal's session that has been idle longest, or is refused (429 "
        "mcp_sessions_exhausted) when every one of them has a request in flight.",
    )
    mcp_sessions_max: int = Field(
        default=1024,
        ge=2,
        description="MCP sessions the hub holds open at once, every principal and profile "
        "counted; the last mcp_sessions_operator_reserve of them only operators may open. When "
        "a principal may open no more, a new session closes one of its own idle sessions or is "
        "refused (429 mcp_sessions_hub_full).",
    )
    mcp_sessions_operator_reserve: int = Field(
        default=32,
        ge=1,
        description="How many of mcp_sessions_max only operators may open, so that other "
        "principals' sessions never lock the operator out; smaller than mcp_sessions_max.",
    )
    mcp_session_idle_s: float = Field(
        default=1800.0,
        gt=0,
        description="Seconds an MCP session may go without a request in flight (a call, an open "
        "event stream) before the hub ends it; the client then opens a new one.",
    )

    # -- the web UI's sessions and live streams ---------------------------------------------
    ui_sessions_per_principal: int = Field(
        default=20,
        ge=1,
        description="Web UI sessions one principal may hold; signing in once more closes that "
        "principal's own oldest session (and its live pages), never another's.",
    )
    ui_sessions_max: int = Field(
        default=10_000,
        ge=1,
        description="Web UI sessions the hub holds in all; once full (expired ones dropped), a "
        "sign-in is refused 429 `ui_sessions_full` rather than signing anyone else out.",
    )
    ui_signins_per_minute: int = Field(
        default=30,
        ge=0,
        description="Web UI sign-ins one principal may make a minute; one more is refused 429 "
        "`signin_rate_limited` with Retry-After. 0: no limit.",
    )
    ui_live_streams_per_session: int = Field(
        default=16,
        ge=1,
        description="Live pages (open /ui/.../live streams) one web UI session may hold; one "
        "more is refused 429 `live_streams_exceeded` (the page shows what it loaded, not live).",
    )
    ui_live_streams_per_principal: int = Field(
        default=32,
        ge=1,
        description="Live pages one principal may hold over all its web UI sessions; one more "
        "is refused 429 `live_streams_exceeded`.",
    )
    ui_live_refresh_s: float = Field(
        default=0.25,
        ge=0,
        description="Least time, in seconds, between two renders of one live panel (and a "
        "quarter of it between two renders of any of one principal's panels): a burst of changes "
        "is shown at once and then at most this often, its last state always shown. 0: no wait.",
    )
    max_tool_rounds: int = Field(
        default=8,
        ge=1,
        le=100,
        description="Rounds of tool calls an openai or anthropic agent may make in one turn "
        "before the turn fails (runtime_tool_rounds).",
    )
    discord_link_code_ttl_s: float = Field(
        default=600.0,
        ge=30,
        le=86400,
        description="Seconds a Discord link code (`parley discord link`) works; then /link "
        "answers link_code_invalid and the code is deleted. Ten minutes by default.",
    )
    discord_link_codes_per_human: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Link codes a human may hold at once; asking for one more replaces the "
        "oldest, which /link then answers with link_code_invalid.",
    )

    @model_validator(mode="after")
    def _reserve_leaves_room(self) -> HubSettings:
        if self.mcp_sessions_operator_reserve >= self.mcp_sessions_max:
            raise ValueError(
                f"mcp_sessions_operator_reserve ({self.mcp_sessions_operator_reserve}) must be "
                f"smaller than mcp_sessions_max ({self.mcp_sessions_max}), or only operators "
                "could open MCP sessions; lower PARLEY_MCP_SESSIONS_OPERATOR_RESERVE or raise "
                "PARLEY_MCP_SESSIONS_MAX"
            )
        return self
