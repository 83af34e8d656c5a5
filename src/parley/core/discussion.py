"""Discussion rules that need no I/O: the template moderator's messages (C4), speaker prompts
(C5), reply parsing for silence and end votes (C6, C7), member snapshots (C12) and the decision
of how a round ends.

The moderator uses no model: every message it posts is one of the templates below, with the
wording of source 000 §7 and §9.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from parley.core import quoting as q
from parley.core.channels import (
    MAX_MEMBERS,
    TRANSCRIPT_WINDOW,
    ChannelMessage,
    EndReason,
    RejectReason,
)
from parley.core.errors import InvalidRequest
from parley.core.runtime import DONE_MARKER, NO_REPLY, Prompt, TranscriptEntry

MIN_ROUNDS, MAX_ROUNDS = 1, 5
# Each transcript entry is capped so one huge message cannot blow the prompt; the cap is marked.
ENTRY_CHAR_CAP = 4000
TRUNCATION_MARK = " …[truncated]"
# The whole transcript is bounded too (source 003 §2: per-entry caps and a total budget), so a
# window of long messages cannot outgrow a model's context; the oldest entries leave first and
# the task keeps its own section whatever the budget. 128 capped entries could reach ~520k chars.
TRANSCRIPT_CHAR_BUDGET = 48_000


# How the initiator finishes, named as each kind of agent sees it: an MCP tool or a function
# call (agents on an API runtime get the same tool set), the CLI, or the REST route.
CALLBACK_TOOL = "discuss_callback"
CLOSE_REASON_MAX_CHARS = 2000
"""The longest reason an operator may give for force-closing a discussion (C15)."""


def callback_how(channel_id: str) -> str:
    """The callback, spelled for every surface an initiator may use (source 000 §7.1)."""
    return (
        f"     (MCP or function tool {CALLBACK_TOOL}; CLI: parley discuss callback {channel_id} "
        f"<summary-path>; REST: POST /v1/channels/{channel_id}/callback)"
    )


def kickoff(guide: str, channel_id: str) -> str:
    """The moderator's first message (C4); the initiator's guide is quoted (core/quoting)."""
    return f"""[Discussion Started]

This channel was created for a temporary agent discussion.

Goal:
{q.quote(guide.strip())}

Instructions:
1. Discuss only the topic above.
2. Work toward a concrete conclusion.
3. When the initiator decides the goal has been achieved, the initiator must:
   - write a summary document to a file
   - call the tool: {CALLBACK_TOOL}
{callback_how(channel_id)}
   - provide the summary document path

Completion rule:
Only the discussion initiator may finish this discussion.

After callback:
- this channel will be closed
- further discussion messages will be ignored
- this channel will remain only for archive/reference
- the original work channel will be notified with the summary file path"""


IDLE_REMINDER = """[Discussion Idle]

No agent responded in the latest discussion round.
If the discussion goal has been achieved, the initiator should now:
1. write the discussion summary to a file in the workspace
2. call discuss_callback with the summary file path

If more discussion is still needed, continue the discussion in this channel."""

CHANNEL_CLOSED = """[Channel Closed]

This discussion channel has been closed.
It is now kept for archive/reference only.
Further discussion in this channel is ignored."""


def rounds_ended(reason: str, rounds: int) -> str:
    """Posted in a discussion channel when a run of rounds ends without the callback."""
    why = {
        "unanimous": "every participant voted to end in the same round",
        "max_rounds": f"the round limit ({rounds}) was reached",
    }.get(reason, reason)
    return f"""[Discussion Rounds Ended]

The discussion rounds stopped: {why}.
This does not verify any conclusion. The initiator should now:
1. write the discussion summary to a file in the workspace
2. call discuss_callback with the summary file path

If more discussion is still needed, post in this channel to start more rounds."""


def reminder_after(end: str, rounds: int) -> str | None:
    """The moderator's reminder to the initiator when a run of rounds ends and the discussion
    stays open (C6): the idle reminder, the rounds-ended one, or None for an end that calls
    for none (superseded, cancelled, failed...)."""
    if end == "idle":
        return IDLE_REMINDER
    if end in ("unanimous", "max_rounds"):
        return rounds_ended(end, rounds)
    return None


def stale_reminder(idle_minutes: int) -> str:
    return f"""[Discussion Stale]

This discussion has been idle for {idle_minutes} minutes.
If the discussion goal has been achieved, the initiator should now:
1. write the discussion summary to a file in the workspace
2. call discuss_callback with the summary file path

An operator may force-close a discussion that is no longer needed."""


def result_ready(summary_path: str, discussion_channel_id: str) -> str:
    """The result-ready message in the origin channel (C9); a path that is not one plain word
    is shown as a JSON string, so no file name can add lines to it."""
    return f"""[Discussion Result Ready]

A temporary discussion has completed.

Summary file:
{q.label(summary_path)}

Source discussion channel:
<#{discussion_channel_id}>

Status:
completed

Continue the original task using the summary file above."""


def force_closed(discussion_channel_id: str, reason: str) -> str:
    return f"""[Discussion Closed]

The discussion in <#{discussion_channel_id}> was closed by the operator without a summary.

Reason:
{q.quote(reason.strip())}

Continue the original task without it."""


def interrupted(reason: str) -> str:
    return f"""[Discussion Interrupted]

The running discussion was stopped: {reason}.
Messages already posted are kept. Post a new message in this channel to start again."""


# -- members and rounds --------------------------------------------------------------------------
def snapshot_members(members: Iterable[str]) -> list[str]:
    """Deduplicate keeping first-seen order (a member listed twice speaks and votes once)."""
    seen: dict[str, None] = {}
    for member in members:
        seen.setdefault(member, None)
    out = list(seen)
    if len(out) > MAX_MEMBERS:
        raise InvalidRequest(
            f"a discussion has at most {MAX_MEMBERS} members; got {len(out)}",
            code="too_many_members",
        )
    return out


def check_rounds(rounds: int) -> int:
    if not MIN_ROUNDS <= rounds <= MAX_ROUNDS:
        raise InvalidRequest(
            f"discussion_rounds must be between {MIN_ROUNDS} and {MAX_ROUNDS}; got {rounds!r}",
            code="invalid_rounds",
        )
    return rounds


def check_private_channel_args(callback_channel_id: str | None, guide: str | None) -> None:
    """C3: callbackChannelId switches discussion mode on, and then discussGuide is required."""
    if callback_channel_id is None:
        if guide:
            raise InvalidRequest(
                "discussGuide is only meaningful with callbackChannelId; pass the origin channel "
                "id as callbackChannelId to open a discussion, or drop discussGuide",
                code="guide_without_callback",
            )
        return
    if not callback_channel_id.strip():
        raise InvalidRequest("callbackChannelId is empty", code="invalid_callback_channel")
    if not guide or not guide.strip():
        raise InvalidRequest(
            "discussGuide is required with callbackChannelId: say what to discuss and what "
            "conclusion is wanted",
            code="guide_required",
        )


@dataclass(frozen=True)
class Reply:
    """A runtime's text, interpreted: silent (NO_REPLY), a vote to end, and what to post."""

    content: str
    silent: bool
    voted_done: bool


def parse_reply(text: str) -> Reply:
    """A trailing ``[[DISCUSSION_DONE]]`` is a vote; every occurrence of the marker is removed,
    so it never appears in stored text nor in the next speaker's transcript (C7)."""
    body = text.rstrip()
    if body.strip() == NO_REPLY:
        return Reply("", silent=True, voted_done=False)
    voted = body.endswith(DONE_MARKER)
    body = body.replace(DONE_MARKER, "").strip()
    if body.strip() == NO_REPLY:
        return Reply("", silent=True, voted_done=voted)
    # A vote with no words is still a turn: post a short marker so the transcript shows it.
    return Reply(body if body else "(agrees to end the discussion)", silent=False, voted_done=voted)


def is_trigger(channel_kind: str, *, sender_kind: str, own_work_channel: bool) -> bool:
    """Whether a post starts a task (and supersedes the running one).

    In an agent's work channel every message but the agent's own wakes it (C2). In a group or
    direct channel only a user's message does (source 003 §4: the reply is checked against the
    room's latest *user* message, and agent messages are only appended and broadcast, never
    dispatched): an agent's post out of turn is kept and is context for the next speakers, but
    it neither supersedes the running discussion nor starts one. In a discussion channel the
    members are agents and any member's post starts more rounds (source 000 §7.2: "continue
    the discussion in this channel")."""
    if channel_kind == "work":
        return not own_work_channel
    if channel_kind in ("group", "direct"):
        return sender_kind != "agent"
    return True


def stop_reason(
    channel_status: str | None, latest_trigger: str | None, trigger_id: str
) -> tuple[RejectReason, EndReason]:
    """Why a task's reply is refused or its call abandoned, and how the task then ends (C10).
    One event gives one code on every path: at the commit check, for an abandoned call, and
    when a hub that restarts finds the task."""
    if channel_status is None or channel_status == "deleted":
        return "room_deleted", "deleted"
    if channel_status == "closed":
        # Closed by its callback or by the operator: the rounds were cancelled, not superseded.
        return "cancelled", "closed"
    if latest_trigger != trigger_id:
        return "new_message", "superseded"
    return "cancelled", "cancelled"


@dataclass
class RoundTally:
    """What happened in one round: who spoke and who voted to end."""

    number: int
    spoke: set[str] = field(default_factory=set)
    voted: set[str] = field(default_factory=set)

    def unanimous(self, members: Sequence[str]) -> bool:
        return bool(members) and all(m in self.voted for m in members)

    @property
    def silent(self) -> bool:
        return not self.spoke


# -- prompts --------------------------------------------------------------------------------------
def transcript_entry(msg: ChannelMessage, names: dict[str, str]) -> TranscriptEntry:
    """How ``msg`` appears in a speaker's transcript: speaker name, role, capped content."""
    content = msg.content
    if len(content) > ENTRY_CHAR_CAP:
        content = content[:ENTRY_CHAR_CAP] + TRUNCATION_MARK
    role = {"agent": "agent", "human": "user", "moderator": "moderator", "system": "system"}[
        msg.sender_kind
    ]
    return TranscriptEntry(
        id=msg.id, speaker=names.get(msg.sender_id, msg.sender_id), role=role, content=content
    )


def window_size(
    entries: Sequence[TranscriptEntry],
    *,
    limit: int = TRANSCRIPT_WINDOW,
    budget: int = TRANSCRIPT_CHAR_BUDGET,
) -> int:
    """How many of the most recent ``entries`` make the transcript: at most ``limit`` of them
    and at most ``budget`` characters together (C5, Q3)."""
    used = count = 0
    for entry in reversed(entries[-limit:] if limit else ()):
        used += entry.prompt_chars
        if used > budget:
            break
        count += 1
    return count


class RunningWindow:
    """The transcript entries of a running discussion with their sizes summed as they arrive,
    so the window of each prompt is found by a binary search instead of summing up to
    ``limit`` entries every turn. ``size()`` always equals ``window_size(entries)``."""

    def __init__(
        self,
        entries: Iterable[TranscriptEntry] = (),
        *,
        limit: int = TRANSCRIPT_WINDOW,
        budget: int = TRANSCRIPT_CHAR_BUDGET,
    ) -> None:
        self.limit = limit
        self.budget = budget
        self.entries: list[TranscriptEntry] = []
        # _ends[i] is the size of entries[:i] together: sizes are positive, so it only grows.
        self._ends = [0]
        for entry in entries:
            self.append(entry)

    def append(self, entry: TranscriptEntry) -> None:
        self.entries.append(entry)
        self._ends.append(self._ends[-1] + entry.prompt_chars)

    def drop_oldest(self, count: int) -> None:
        del self.entries[:count]
        base = self._ends[count]
        self._ends = [end - base for end in self._ends[count:]]

    def size(self) -> int:
        """How many of the newest entries make the window (as ``window_size``)."""
        n = len(self.entries)
        oldest = max(0, n - self.limit) if self.limit else n
        # The oldest entry that can stay: the ones from it on fit the budget together.
        start = bisect_left(self._ends, self._ends[n] - self.budget, oldest, n + 1)
        return n - start

    def chars(self, count: int) -> int:
        """What the newest ``count`` entries add to a prompt together (their ``prompt_chars``)."""
        n = len(self.entries)
        return self._ends[n] - self._ends[n - count]


def transcript_window(
    messages: Sequence[ChannelMessage],
    window: int = TRANSCRIPT_WINDOW,
    *,
    names: dict[str, str] | None = None,
    budget: int = TRANSCRIPT_CHAR_BUDGET,
) -> list[ChannelMessage]:
    """The most recent ``window`` messages (C5) that fit the transcript's character budget."""
    recent = messages[-window:] if window else []
    entries = [transcript_entry(m, names or {}) for m in recent]
    size = window_size(entries, limit=window, budget=budget)
    return list(recent[len(recent) - size :])


def build_prompt(
    *,
    agent_id: str,
    agent_name: str,
    persona: str,
    mode: str,
    members: Sequence[str],
    names: dict[str, str],
    round_number: int,
    rounds: int,
    task: str,
    window: Sequence[ChannelMessage],
    entries: Sequence[TranscriptEntry] | None = None,
    worker_session: bool = False,
) -> Prompt:
    """The prompt of one speaker in one round (C5). The task stays in its own section even when
    its message has left the transcript window; transcript text is quoted, not instructions.
    ``entries`` are the window's transcript entries when the caller already has them.
    ``worker_session``: the channel is the session of a task a parent gave the agent as a
    worker, not its own work channel, and the prompt says so."""
    roster = ", ".join(f"{names.get(m, m)} ({m})" for m in members)
    kind = "moderated discussion" if mode == "discussion" else "group discussion"
    system = (
        f"You are {agent_name} (id {agent_id}).\n"
        + (f"{persona.strip()}\n" if persona.strip() else "")
        + f"You take part in a {kind} with: {roster}.\n"
        + f"This is round {round_number} of {rounds}."
    )
    if mode == "wake":
        system = (
            f"You are {agent_name} (id {agent_id}).\n"
            + (f"{persona.strip()}\n" if persona.strip() else "")
            + (
                "This is the session of a task given to you as a worker: the task, and messages "
                "from whoever gave it, arrive here. A new message arrived for you."
                if worker_session
                else "This is your work channel. A new message arrived for you."
            )
        )
        where = "this task's session" if worker_session else "your work channel"
        instructions = (
            f"Answer the latest message in {where}. If it is a discussion result, read "
            "the summary file it names and continue your original task. "
            f"If nothing needs an answer, reply exactly {NO_REPLY}."
        )
    elif round_number == 1:
        instructions = (
            "State your position on the task and ask the other participants concrete questions "
            "about what is unclear or risky. Be specific and brief."
        )
    else:
        instructions = (
            "Answer the questions the others asked you, test the assumptions made so far "
            "(yours included), and refine the proposal. Do not repeat what was already said."
        )
    if mode != "wake":
        instructions += (
            f"\nIf you have nothing to add, reply exactly {NO_REPLY}. If you think the discussion "
            f"can end, finish your reply with {DONE_MARKER} — it ends early only if every "
            "participant does so in the same round."
        )
    return Prompt(
        system=system,
        task=task,
        transcript=(
            tuple(entries)
            if entries is not None
            else tuple(transcript_entry(m, names) for m in window)
        ),
        instructions=instructions,
    )
