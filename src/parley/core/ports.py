"""The ports through which parley's core and service talk to the world.

Adapters implement them: ``adapters/store`` (SQLite, PostgreSQL), ``adapters/bus`` (in-process,
PostgreSQL LISTEN/NOTIFY), ``adapters/runtimes`` (scripted, openai, anthropic, command, remote) and
``adapters/workspace``. The core imports none of those.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from parley.core.channels import Channel, ChannelMessage, LogicalSession
from parley.core.identity import Principal, TokenRecord
from parley.core.mail import InboxFilter, MailSummary, Message
from parley.core.meetings import SpeakerSources
from parley.core.processes import RuntimeProcess
from parley.core.rooms import Meeting
from parley.core.runtime import Turn, TurnResult
from parley.core.search import SearchHit, SearchQuery
from parley.core.usage import UsageFilter, UsageTotal

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """Rows of a list, bounded by a count and a byte budget; ``more`` says whether the store holds
    more rows after them (fetch them from the last row's position)."""

    rows: list[T]
    more: bool


class Tx(Protocol):
    """One store transaction. Record names are table names: principals, events, messages,
    channels, channel_messages, sessions, tasks, invocations, pending_turns, invitations."""

    def after_commit(self, callback: Callable[[], Awaitable[None] | None]) -> None: ...
    def insert(self, name: str, record: BaseModel) -> None: ...
    async def get(self, name: str, key: str, *, for_update: bool = False) -> Any: ...
    async def update(self, name: str, key: str, **values: Any) -> int: ...
    async def delete(self, name: str, key: str) -> int:
        """Delete one record by id; only for records that are not history (a room membership,
        a brief past the board's cap, an empty room and its board)."""
        ...

    async def select(
        self, name: str, *where: Any, order_by: Sequence[Any] = (), limit: int | None = None
    ) -> list[Any]: ...
    async def page(
        self, name: str, *where: Any, key: str, limit: int, max_bytes: int | None
    ) -> Page[Any]:
        """Rows in ``key`` order, at most ``limit`` of them, and no more once they hold
        ``max_bytes`` of text and JSON (always at least one; ``None``: no byte budget)."""
        ...

    def table(self, name: str) -> Any: ...
    async def count(self, name: str, *where: Any) -> int:
        """How many records match ``where``."""
        ...

    async def flush(self) -> None: ...

    async def insert_token(
        self, token_hash: str, principal_id: str, label: str, at: datetime
    ) -> None: ...
    async def principal_by_token(self, token_hash: str) -> Principal | None: ...
    async def revoke_tokens(self, principal_id: str, at: datetime) -> int: ...
    async def tokens_of(self, principal_id: str) -> list[TokenRecord]:
        """The principal's tokens that are not revoked, oldest first."""
        ...

    async def revoke_token(self, principal_id: str, token_hash: str, at: datetime) -> int: ...
    async def touch_token(self, token_hash: str, at: datetime) -> None: ...

    def deliver_to_inbox(self, msg: Message, placed: Callable[[Message], None]) -> None:
        """Store ``msg`` at the next position of its recipient's inbox. The positions of all of
        a transaction's mail are taken together, just before it commits (or before a statement
        that reads mail), under each recipient's lock until the commit: ``msg.seq`` is set
        then, and ``placed(msg)`` called (to publish it), in the order of these calls."""
        ...

    async def message_by_idempotency(self, from_id: str, key: str) -> Message | None: ...
    async def list_inbox(self, recipient_id: str, flt: InboxFilter) -> list[Message]:
        """The rows of ``inbox_page`` without a byte budget."""
        ...

    async def inbox_page(
        self, recipient_id: str, flt: InboxFilter, *, max_bytes: int | None
    ) -> Page[Message]:
        """An inbox in ``seq`` order, as ``page`` bounds a list."""
        ...

    async def mark_delivered(self, ids: Sequence[str], at: datetime) -> list[str]:
        """Mark the pending ones of ``ids`` delivered at ``at``; the ids it marked."""
        ...

    async def last_broadcast_at(self, sender_id: str) -> datetime | None: ...
    async def expire_due(self, now: datetime) -> list[Message]: ...
    async def thread_messages(self, ids: set[str], correlation: set[str]) -> list[Message]: ...
    async def summary(self, recipient_id: str, now: datetime) -> MailSummary: ...

    async def channel_members(self, channel_id: str) -> list[str]: ...
    async def get_channel(self, channel_id: str, *, for_update: bool = False) -> Channel | None: ...
    async def set_members(self, channel_id: str, members: Sequence[str]) -> None: ...
    async def channels_page(
        self,
        member_id: str | None,
        *,
        after: str | None,
        kinds: Sequence[str] | None,
        limit: int,
        max_bytes: int | None,
    ) -> Page[Channel]:
        """Channels not deleted, in id order after ``after``, as ``page`` bounds a list, with
        their members: those ``member_id`` is a member of or created (all, for None), of
        ``kinds`` only when given."""
        ...

    async def next_channel_seq(
        self, channel_id: str, *, trigger_id: str | None = None, now: datetime | None = None
    ) -> int: ...
    async def claim_channel_seq(
        self, channel_id: str, *, trigger_id: str, task_id: str, now: datetime
    ) -> int | None: ...
    async def renew_task_leases(self, owner: str, until: datetime) -> list[str]:
        """Extend the leases of the running tasks ``owner`` holds; return their ids."""
        ...

    async def last_trigger_id(self, channel_id: str) -> str | None: ...
    async def channel_messages(
        self,
        channel_id: str,
        *,
        after_seq: int | None = None,
        latest: int | None = None,
        limit: int = 500,
    ) -> list[ChannelMessage]:
        """The rows of ``channel_page`` without a byte budget."""
        ...

    async def channel_page(
        self,
        channel_id: str,
        *,
        after_seq: int | None = None,
        latest: int | None = None,
        limit: int = 500,
        max_bytes: int | None,
    ) -> Page[ChannelMessage]:
        """Messages in channel order after ``after_seq``, as ``page`` bounds a list; with
        ``latest``, the newest ones (at most that many) instead of the first ``limit``."""
        ...

    async def session_for(self, agent_id: str, channel_id: str) -> LogicalSession | None: ...

    async def speaker_sources(
        self, meeting_channel_id: str, agent_id: str, work_channel_id: str | None, latest: int
    ) -> SpeakerSources:
        """The meeting channel's members and, of the agent's own context, at most ``latest``
        work-channel messages and open mails other than minutes (the newest of each, in order),
        in one read of only the columns a speaker's projection quotes."""
        ...

    async def count_meeting_turn(
        self, meeting_id: str, *, spoke: bool, round_number: int
    ) -> Meeting | None:
        """Count one ended turn of a meeting (and its speech when ``spoke``) under the row's lock
        and give back the row as it stands after; None if there is no such meeting."""
        ...

    async def usage_totals(
        self, by: str | None, flt: UsageFilter, viewer: str | None
    ) -> list[UsageTotal]:
        """The usage of the calls ``flt`` picks, only ``viewer``'s own unless None: one total
        per value of ``by`` (agent, day, model, tree, discussion, meeting, channel) in its
        order, or one total of all for None."""
        ...

    async def search(
        self, query: SearchQuery, words: list[str], viewer: str | None
    ) -> list[SearchHit]:
        """Mail and channel messages that hold every one of ``words`` (as word prefixes; no
        words: every message) and pass ``query``'s filters, that ``viewer`` may read (all for
        None), newest first, at most ``query.limit``."""
        ...


class Store(Protocol):
    """Durable state. Reads share pooled connections; writes are jobs run in a transaction."""

    dialect: str

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    def read(self) -> AbstractAsyncContextManager[Tx]: ...
    async def write(self, job: Callable[[Tx], Awaitable[T]], *, eager: bool = False) -> T:
        """Run ``job`` in a write transaction, possibly batched with others, and return its
        result once committed. ``eager``: a write on a discussion's critical path may run in
        the caller's task when no other write is queued or running, where the store allows
        it (the hop to the writer is then pure latency, and there is nothing to batch)."""
        ...

    async def refresh_search_index(self) -> None:
        """Bring the full-text index up to date with what is stored, before a search: where
        the store keeps that index itself (SQLite), the rows stored since the last search are
        indexed now, so storing a message pays nothing for search; where the database keeps
        it with every row (PostgreSQL), nothing."""
        ...

    async def storage_state(self) -> Literal["ok", "full"]:
        """``full`` while writes are refused because the disk holding the store is full
        (``storage_full``); asked then, the store checks whether space has returned."""
        ...

    async def mark_alive(self, owner: str) -> None:
        """Mark this process as the hub ``owner`` for as long as the store stays open."""

    async def is_alive(self, owner: str) -> bool:
        """Whether the hub ``owner`` still has the store open: its process has not died."""


class Subscription(Protocol):
    """Live events on some topics, in publish order; close it when done."""

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...
    async def get(self) -> dict[str, Any]: ...
    async def close(self) -> None: ...


class Bus(Protocol):
    """Live fan-out. Topics: ``inbox:<principal>``, ``channel:<id>``, ``turns:<agent>``,
    ``hub``. A publish is only a nudge: the store stays the source of truth. ``shared``: other
    hub processes publish on it too; ``state`` says how it is doing (``/readyz``)."""

    shared: bool

    @property
    def state(self) -> str: ...
    async def start(self) -> None:
        """Start listening (the store is open by then)."""
        ...

    async def publish(self, topic: str, data: dict[str, Any]) -> None: ...
    def publish_on_commit(self, tx: Tx, topic: str, data: dict[str, Any]) -> None:
        """Publish once ``tx`` has committed, never if it rolls back; subscribers see the
        publishes of several transactions in their commit order."""
        ...

    def subscribe(self, topics: Iterable[str]) -> Subscription: ...
    async def close(self) -> None: ...


class Runtime(Protocol):
    """Makes one agent produce one turn (W9)."""

    kind: str

    async def respond(self, turn: Turn) -> TurnResult: ...
    async def aclose(self) -> None: ...


class Clock(Protocol):
    def now(self) -> datetime: ...
    def monotonic(self) -> float: ...


class Workspace(Protocol):
    """File checks against an agent's workspace directory."""

    def resolve_inside(self, workspace: str, path: str) -> Path:
        """Resolve ``path`` (relative to the workspace, or absolute) with ``..`` and symlinks
        resolved; raise if it does not exist or lies outside the workspace, without saying
        where it leads."""
        ...

    def write_inside(self, workspace: str, path: str, data: bytes) -> Path:
        """Write ``data`` to ``path`` (relative to the workspace, or absolute) once it resolves
        inside the workspace, creating missing directories (0700) and a new file 0600; return
        the resolved path. Raise PermissionDenied (``file_outside_workspace``) for a path that
        leads outside, InvalidRequest (``invalid_file_path``) for one that cannot be a file."""
        ...

    def prepare(self, workspace: str, taken: Mapping[str, str]) -> str:
        """Check a new agent's workspace and create it (0700) if it is missing; return it
        absolute with symlinks resolved. Raise InvalidRequest (``invalid_workspace``) for a
        relative path or a system directory, Conflict (``workspace_overlap``) when it equals,
        contains or lies inside one of ``taken`` (agent id → workspace)."""
        ...


@runtime_checkable
class SessionProcesses(Protocol):
    """A runtime that keeps a process per logical session between turns (Claude Code)."""

    async def end_session(self, session_id: str) -> None:
        """Stop the session's process and everything it started; a turn running on it keeps
        it until the turn ends, and it is stopped then."""
        ...


class ProcessLedger(Protocol):
    """Where a hub keeps the record of the processes its runtimes run (its store)."""

    async def started(self, process: RuntimeProcess) -> None: ...
    async def ended(self, process_id: str) -> None: ...


class ProcessKeeper(Protocol):
    """The processes runtimes run on this machine: whose they are, and ending a dead hub's."""

    host: str

    def bind(self, hub_id: str, ledger: ProcessLedger) -> None:
        """From now on processes started here belong to ``hub_id``, recorded in ``ledger``."""
        ...

    def unbind(self, hub_id: str) -> None: ...

    async def end_orphans(
        self, records: Sequence[RuntimeProcess], dead_hubs: Iterable[str]
    ) -> list[int]:
        """End what ``records`` (of dead hubs, on this machine) still name, every process below
        them, and every process whose environment names one of ``dead_hubs`` as its owner;
        return the pids ended."""
        ...


class RuntimeSource(Protocol):
    """Gives the runtime for an agent's runtime config (reusing one per agent), or None when
    the agent has no runtime of its own."""

    def get(self, agent_id: str, config: dict[str, Any]) -> Runtime | None: ...
    def validate(self, config: dict[str, Any]) -> None:
        """Raise InvalidRequest for a config that could never be built."""
        ...

    async def aclose(self) -> None: ...
