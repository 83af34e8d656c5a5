"""What members say in a meeting, each with its own runtime (R3, R5, R8, R11): speeches with
the bounded projection of the speaker's own context and the budget enforced at the commit point,
and minutes validated and delivered.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass

from parley.core import discussion as d
from parley.core import meetings as mt
from parley.core.channels import TRANSCRIPT_WINDOW, ChannelMessage, Invocation, InvocationOutcome
from parley.core.errors import RuntimeFailure
from parley.core.identity import MODERATOR_ID, Principal
from parley.core.ids import new_ulid
from parley.core.limits import text_problem
from parley.core.ports import Runtime, Tx
from parley.core.redact import redact_text
from parley.core.rooms import Meeting, Minutes, Room, Speech, SpeechOutcome
from parley.core.runtime import AgentProfile, Prompt, TranscriptEntry, Turn, Usage
from parley.core.usage import BudgetExhausted
from parley.service.context import ServiceContext
from parley.service.conversations.channels import Channels
from parley.service.conversations.tasks import TaskRunner
from parley.service.identity import Identity
from parley.service.mail.mailbox import Mail

PROJECTION_MESSAGES = 20

# A speech attempt as the turn metrics count it: over the limit, the hub rejected what came back.
_CALL_OUTCOMES: dict[SpeechOutcome, InvocationOutcome] = {
    "accepted": "accepted",
    "over_limit": "rejected",
    "failed": "failed",
}


def profile_of(agent: Principal) -> AgentProfile:
    """Who a runtime is asked to speak as."""
    return AgentProfile(
        id=agent.id,
        display_name=agent.display_name,
        workspace=agent.workspace,
        persona=agent.persona,
        runtime=agent.runtime,
    )


def meeting_turn(
    ctx: ServiceContext,
    invocation_id: str,
    agent: AgentProfile,
    meeting: Meeting,
    prompt: Prompt,
    stop: asyncio.Event,
    round_number: int,
) -> Turn:
    """A turn in a meeting, cancelled by the emergency stop. It carries no task id: it is not a
    discussion task, and a remote agent's answer must not be checked against one. It offers no
    tools: a meeting is for talking."""
    return Turn(
        invocation_id=invocation_id,
        agent=agent,
        channel_id=meeting.channel_id,
        session_id=meeting.id,
        prompt=prompt,
        timeout_s=ctx.settings.turn_timeout_s,
        cancel=stop,
        round=round_number,
    )


_NAMES = {MODERATOR_ID: "moderator", "system": "system"}


def entries(
    window: Sequence[ChannelMessage], rendered: dict[str, TranscriptEntry] | None = None
) -> tuple[TranscriptEntry, ...]:
    """The quoted transcript of a meeting prompt: the window's messages, each capped, the
    oldest left out once the whole would pass the transcript budget, as in a discussion (128
    long speeches and interjections would outgrow a model's context). ``rendered`` keeps the
    entries across the prompts of one meeting, so each message is rendered and measured once."""
    cache = {} if rendered is None else rendered
    if len(cache) > 2 * TRANSCRIPT_WINDOW:
        keep = {m.id for m in window}
        for key in [key for key in cache if key not in keep]:
            del cache[key]
    quoted: list[TranscriptEntry] = []
    for m in window:
        entry = cache.get(m.id)
        if entry is None:
            entry = cache[m.id] = d.transcript_entry(m, _NAMES)
        quoted.append(entry)
    return tuple(quoted[len(quoted) - d.window_size(quoted) :])


@dataclass(frozen=True)
class SpeakerContext:
    """What a speaker's prompt needs from the store besides the transcript: the humans in the
    meeting's channel (present: they may speak at any time) and the bounded projection of its
    own context."""

    humans: list[str]
    projection: str


async def _insert_minutes(record: Minutes, tx: Tx) -> None:
    tx.insert("minutes", record)


class Voices:
    """Speeches and minutes of meeting members, each produced by the member's own runtime."""

    def __init__(
        self,
        ctx: ServiceContext,
        identity: Identity,
        channels: Channels,
        tasks: TaskRunner,
        mail: Mail,
        runtime_for: Callable[[Principal], Runtime | None],
    ) -> None:
        self.ctx = ctx
        self.identity = identity
        self.channels = channels
        self.tasks = tasks
        self.mail = mail
        self.runtime_for = runtime_for

    async def context(self, tx: Tx, meeting: Meeting, room: Room, member: str) -> SpeakerContext:
        """Read, inside ``tx``, what the next speaker's prompt needs from the store: the bounded
        projection of the agent's OWN context (its latest work-channel messages and its open
        mail), read at each speech, not at entry, since it keeps working meanwhile."""
        agent = await self.identity.require(member, tx)
        # One read of only the columns quoted: three statements turning whole rows into models
        # cost more than all the rest of the speaker's prompt.
        found = await tx.speaker_sources(
            meeting.channel_id, agent.id, agent.work_channel_id, PROJECTION_MESSAGES
        )
        mail = [(subject, body) for _kind, subject, body in found.mail]
        # The hub's copies of earlier minutes in the work channel are bookkeeping, as the
        # minutes mail is: the member's own work keeps the budget.
        work = [(who, what) for who, what in found.work if not mt.is_minutes_post(who, what)]
        projection = mt.project_context(work, mail, room.config.projection_chars)
        # Every summoned member is in the channel, present or not: only the humans in it are
        # present without being attendees (an agent convener that summoned others is not).
        summoned = {a.agent_id for a in meeting.attendees}
        humans = []
        for member_id in found.channel_members:
            if member_id in summoned:
                continue
            who = await self.identity.get(member_id, tx)
            if who is not None and who.kind == "human":
                humans.append(member_id)
        return SpeakerContext(humans, projection)

    async def speak(
        self,
        stop: asyncio.Event,
        meeting: Meeting,
        room: Room,
        window: list[ChannelMessage],
        transcript: tuple[TranscriptEntry, ...],
        member: str,
        counts: dict[str, int],
        context: SpeakerContext,
    ) -> tuple[Meeting, list[ChannelMessage]]:
        """One member's turn: a speech produced with no tools by its own runtime, committed with
        its record when accepted; over the hard limit it is asked once more, then failed (R5).
        Every turn ends with exactly one record that is not ``over_limit``, whose commit gives
        back the meeting and its transcript window as they stand after it."""
        agent = await self.identity.require(member)
        runtime = self.runtime_for(agent)
        present = mt.present(meeting)
        round_number = mt.round_of(meeting.turns, len(present))
        record = functools.partial(
            self.record_speech,
            meeting,
            window,
            member,
            round_number,
            runtime_kind=agent.runtime_kind,
        )
        if runtime is None:
            return await record(1, "failed", route="", reason="no_runtime")
        try:
            await self.ctx.usage.check(member, meeting.channel_id, "meeting")
        except BudgetExhausted as refusal:
            return await record(1, "failed", route="", reason=refusal.code)
        limit = room.config.speech_limit
        system = "\n\n".join(
            part
            for part in (
                agent.persona,
                mt.entry_prompt(
                    name=agent.display_name,
                    topic=meeting.topic,
                    convened_by=meeting.convened_by,
                    present=[*present, *context.humans],
                    humans=context.humans,
                    awaiting=[a.agent_id for a in meeting.attendees if a.attendance == "awaiting"],
                    absent=[a.agent_id for a in meeting.attendees if a.attendance == "absent"],
                    target=room.config.speech_target,
                    projection=context.projection,
                ),
            )
            if part
        )
        instructions = mt.speech_instructions(first=counts.get(member, 0) == 0)
        profile = profile_of(agent)
        for attempt in (1, 2):
            prompt = Prompt(
                system=system,
                task=meeting.topic,
                transcript=transcript,
                instructions=instructions,
            )
            turn = meeting_turn(self.ctx, new_ulid(), profile, meeting, prompt, stop, round_number)
            started = self.ctx.clock.monotonic()
            try:
                result = await runtime.respond(turn)
            except RuntimeFailure as exc:
                route = redact_text(str(exc.details.get("model_route") or ""))
                return await record(
                    attempt,
                    "failed",
                    route=route,
                    reason=exc.code,
                    started=started,
                    usage=exc.usage,
                    call_id=turn.invocation_id,
                    runtime=agent.runtime,
                )
            text, route = result.text.strip(), redact_text(result.model_route)
            # Each attempt's usage is booked with its record.
            record = functools.partial(
                record, usage=result.usage, call_id=turn.invocation_id, runtime=agent.runtime
            )
            if result.is_silent:
                return await record(
                    attempt, "failed", route=route, reason="no_reply", started=started
                )
            if text_problem(text) is not None:
                # The transcript cannot hold it (a NUL, a lone surrogate): a failed speech, not
                # a store error that would end the whole meeting.
                return await record(
                    attempt, "failed", route=route, reason="invalid_text", started=started
                )
            verdict = mt.judge_speech(text, limit=limit, attempt=attempt)
            if verdict == "accepted":
                return await record(attempt, "accepted", route=route, text=text, started=started)
            committed = await record(
                attempt,
                "over_limit" if verdict == "retry" else "failed",
                route=route,
                reason=f"over_limit: {len(text)} > {limit}",
                chars=len(text),
                started=started,
            )
            if verdict == "failed":
                return committed
            instructions = mt.retry_instructions(limit, len(text))
        raise AssertionError("the second attempt always ends the turn")

    async def record_speech(
        self,
        meeting: Meeting,
        window: Sequence[ChannelMessage],
        member: str,
        round_number: int,
        attempt: int,
        outcome: SpeechOutcome,
        *,
        runtime_kind: str,
        route: str,
        reason: str | None = None,
        text: str | None = None,
        chars: int = 0,
        started: float | None = None,
        usage: Usage | None = None,
        call_id: str | None = None,
        runtime: dict[str, object] | None = None,
    ) -> tuple[Meeting, list[ChannelMessage]]:
        """Commit one speech attempt: the speech itself when accepted, its record, and the
        meeting's counters when it ends the member's turn (all but a first ``over_limit``).
        Such a commit also gives back the meeting row and the transcript ``window`` brought up
        to date, so the driver reads neither again before the next turn."""
        if text is not None:
            chars = len(text)
        answered = self.ctx.clock.monotonic()

        async def job(tx: Tx) -> tuple[Meeting, list[ChannelMessage]]:
            current = meeting
            if outcome != "over_limit":
                # The meeting's row first, as closing it locks it first too.
                row = await tx.count_meeting_turn(
                    meeting.id, spoke=text is not None, round_number=round_number
                )
                assert row is not None, f"meeting {meeting.id!r} is gone"
                current = row
            message: ChannelMessage | None = None
            if text is not None:
                message = await self.channels.append(
                    tx,
                    meeting.channel_id,
                    sender_id=member,
                    sender_kind="agent",
                    content=text,
                    round=round_number,
                    metadata={"runtime": runtime_kind, "model_route": route, "speech": True},
                )
            tx.insert(
                "speeches",
                Speech(
                    id=new_ulid(),
                    meeting_id=meeting.id,
                    agent_id=member,
                    round=round_number,
                    attempt=attempt,
                    outcome=outcome,
                    chars=chars,
                    runtime=runtime_kind,
                    model_route=route[:300],
                    message_id=None if message is None else message.id,
                    reason=reason,
                    created=self.ctx.clock.now(),
                    timings=None
                    if started is None
                    else {
                        "provider_wait_ms": (answered - started) * 1000,
                        "persist_ms": (self.ctx.clock.monotonic() - answered) * 1000,
                    },
                ),
            )
            await tx.update("room_members", member, last_activity=self.ctx.clock.now())
            if usage is not None:
                await self.ctx.usage.record(
                    tx,
                    call_id=call_id or new_ulid(),
                    agent_id=member,
                    usage=usage,
                    runtime=dict(runtime or {"kind": runtime_kind}),
                    route=route,
                    channel_id=meeting.channel_id,
                    channel_kind="meeting",
                    meeting_id=meeting.id,
                )
            if started is not None:
                self.count_call(
                    tx,
                    _CALL_OUTCOMES[outcome],
                    (reason or "").split(":", 1)[0] or None,
                    route or runtime_kind,
                    started,
                )
            if outcome != "accepted":
                self.ctx.events.record(
                    tx,
                    f"meeting.speech_{outcome}",
                    actor=member,
                    subject=f"meeting:{meeting.id}",
                    payload={"round": round_number, "attempt": attempt, "reason": reason},
                    trace_id=meeting.id,
                )
            fresh = list(window)
            if outcome != "over_limit":
                after = window[-1].seq if window else 0
                if message is not None and message.seq == after + 1:
                    fresh.append(message)
                else:
                    # Something landed since the window was read (a human spoke), or this
                    # turn posted nothing to tell: read what is new, the speech included.
                    fresh += await tx.channel_messages(
                        meeting.channel_id, after_seq=after, latest=TRANSCRIPT_WINDOW
                    )
            return current, fresh[-TRANSCRIPT_WINDOW:]

        return await self.ctx.store.write(job, eager=True)

    def count_call(
        self, tx: Tx, outcome: InvocationOutcome, reason: str | None, route: str, started: float
    ) -> None:
        """Count a meeting's runtime call in the hub's turn metrics once it commits, as a
        discussion turn is counted from its invocation record."""
        timings = {"provider_wait_ms": (self.ctx.clock.monotonic() - started) * 1000}
        metrics = self.ctx.metrics
        tx.after_commit(lambda: metrics.turn_recorded(outcome, reason, timings, route))

    def invocation(
        self,
        tx: Tx,
        invocation_id: str,
        meeting: Meeting,
        agent_id: str,
        round_number: int,
        route: str,
        outcome: InvocationOutcome,
        reason: str | None,
        started: float,
    ) -> None:
        """The invocation record of a meeting's runtime call that is no speech (the
        moderator's), counted in the turn metrics."""
        self.count_call(tx, outcome, reason, route, started)
        tx.insert(
            "invocations",
            Invocation(
                id=invocation_id,
                task_id=meeting.id,
                channel_id=meeting.channel_id,
                trigger_id=None,
                round=round_number,
                agent_id=agent_id,
                prompt_first_id=None,
                prompt_last_id=None,
                prompt_chars=0,
                model_route=route,
                outcome=outcome,
                reason=(reason or "")[:64] or None,
                created=self.ctx.clock.now(),
            ),
        )

    async def _book_minutes(
        self, turn: Turn, usage: Usage, agent: Principal, meeting: Meeting, route: str
    ) -> None:
        """Record what writing a member's minutes used (a write of its own: minutes are written
        after the meeting, each draft a call)."""
        if not usage.reported:
            return
        await self.ctx.store.write(
            lambda tx: self.ctx.usage.record(
                tx,
                call_id=turn.invocation_id,
                agent_id=agent.id,
                usage=usage,
                runtime=agent.runtime,
                route=route,
                channel_id=meeting.channel_id,
                channel_kind="meeting",
                meeting_id=meeting.id,
            )
        )

    # -- minutes (R8, R11) ------------------------------------------------------------------------
    async def write_minutes(self, meeting: Meeting, room: Room) -> list[Minutes]:
        """Each present member's own minutes by its own runtime, validated; a refused draft is
        retried once with the reason, then recorded as failed. Every member is asked at once,
        each with its own runtime: one that is slow or never answers holds up nobody else's
        minutes. Each is stored as soon as it is settled (``accepted``, delivered at the close,
        or ``failed``), so a hub that dies in the minutes phase loses none; a member whose
        minutes are already stored is not asked again."""
        async with self.ctx.store.read() as tx:
            messages = await tx.channel_messages(meeting.channel_id, limit=10_000)
        speeches = [m for m in messages if m.sender_kind in ("agent", "human")]
        transcript_chars = sum(len(m.content) for m in speeches)
        quoted = entries(speeches[-TRANSCRIPT_WINDOW:])
        async with self.ctx.store.read() as tx:
            n = tx.table("minutes").c
            stored: list[Minutes] = await tx.select("minutes", n.meeting_id == meeting.id)
        done = {row.agent_id for row in stored}
        # Drafts are judged one at a time against those accepted before them (no two members'
        # minutes may be the same), in the order they come back.
        accepted: list[str] = [row.text for row in stored if row.status != "failed"]
        judging = asyncio.Lock()
        written: dict[str, Minutes] = {}

        async def judge(text: str) -> str | None:
            async with judging:
                reason = mt.validate_minutes(
                    text,
                    transcript_chars=transcript_chars,
                    limit=room.config.minutes_limit,
                    others=accepted,
                )
                if reason is None:
                    accepted.append(text)
                return reason

        async def write(agent_id: str) -> None:
            written[agent_id] = await self._member_minutes(meeting, room, agent_id, quoted, judge)

        asking = [
            a.agent_id
            for a in meeting.attendees
            if a.attendance == "present" and a.agent_id not in done
        ]
        try:
            async with asyncio.TaskGroup() as group:
                for agent_id in asking:
                    group.create_task(write(agent_id))
        except ExceptionGroup as failed:
            # A store failure ends the meeting as it did before: with its own error.
            raise failed.exceptions[0] from None
        return [*stored, *(written[agent_id] for agent_id in asking)]

    async def _member_minutes(
        self,
        meeting: Meeting,
        room: Room,
        agent_id: str,
        quoted: tuple[TranscriptEntry, ...],
        judge: Callable[[str], Awaitable[str | None]],
    ) -> Minutes:
        """One member's minutes, asked of its runtime (twice at most), judged, and stored."""
        agent = await self.identity.require(agent_id)
        runtime = self.runtime_for(agent)
        task = mt.minutes_prompt(
            name=agent.display_name, topic=meeting.topic, limit=room.config.minutes_limit
        )
        reason: str | None = "no_runtime" if runtime is None else None
        text, route, attempts = "", "", 0
        instructions = "Write your minutes now."
        profile = profile_of(agent)
        while runtime is not None and attempts < 2:
            attempts += 1
            prompt = Prompt(
                system=agent.persona, task=task, transcript=quoted, instructions=instructions
            )
            # Minutes are written after the meeting: a stop no longer cancels them.
            turn = meeting_turn(
                self.ctx, new_ulid(), profile, meeting, prompt, asyncio.Event(), meeting.round
            )
            try:
                result = await runtime.respond(turn)
            except RuntimeFailure as exc:
                reason, route = exc.code, redact_text(str(exc.details.get("model_route") or ""))
                if exc.usage is not None:
                    await self._book_minutes(turn, exc.usage, agent, meeting, route)
                continue
            text, route = result.text.strip(), redact_text(result.model_route)
            await self._book_minutes(turn, result.usage, agent, meeting, route)
            reason = await judge(text)
            if reason is None:
                break
            instructions = f"Your draft was refused ({reason}); write it again."
        record = Minutes(
            id=new_ulid(),
            meeting_id=meeting.id,
            agent_id=agent.id,
            status="accepted" if reason is None else "failed",
            text=text if reason is None else "",
            runtime=agent.runtime_kind,
            model_route=route[:300],
            attempts=attempts,
            reason=reason,
            created=self.ctx.clock.now(),
        )
        await self.ctx.store.write(functools.partial(_insert_minutes, record))
        return record

    def missing_minutes(self, meeting: Meeting, agent_id: str) -> Minutes:
        """The record of minutes never written: the hub driving the meeting stopped first."""
        return Minutes(
            id=new_ulid(),
            meeting_id=meeting.id,
            agent_id=agent_id,
            status="failed",
            text="",
            runtime="",
            model_route="",
            attempts=0,
            reason="missing: the hub driving the meeting stopped before these minutes were written",
            created=self.ctx.clock.now(),
        )

    async def absentee_minutes(
        self,
        tx: Tx,
        meeting: Meeting,
        agent_id: str,
        end: str,
        speeches: Sequence[tuple[str, str]],
        limit: int,
        humans: Collection[str] = (),
    ) -> Minutes:
        """The minutes of a summoned member that never entered: the hub's short outcome notice
        (it was not there to write its own), marked as written for an absentee."""
        agent = await self.identity.get(agent_id, tx)
        name = agent.display_name if agent is not None else agent_id
        text = mt.absentee_notice(
            agent_id=agent_id,
            name=name,
            topic=meeting.topic,
            end_reason=end,
            speeches=speeches,
            limit=limit,
            humans=humans,
        )
        return Minutes(
            id=new_ulid(),
            meeting_id=meeting.id,
            agent_id=agent_id,
            status="delivered",
            text=text,
            runtime="hub",
            model_route="",
            attempts=0,
            reason=mt.ABSENTEE_MARK,
            created=self.ctx.clock.now(),
        )

    async def deliver_minutes(self, tx: Tx, meeting: Meeting, record: Minutes) -> Minutes:
        """A ``minutes`` mail, and a message in the member's work channel, which wakes it (C2)
        unless a turn of it runs there: that turn is not superseded by the minutes (a member
        that never entered is still at work), and its next turn reads them."""
        msg = await self.mail.deliver_system(
            tx,
            record.agent_id,
            "minutes",
            f"Minutes: {meeting.topic[:120]}",
            record.text,
            {"meeting_id": meeting.id, "room_id": meeting.room_id},
        )
        agent: Principal | None = await tx.get("principals", record.agent_id)
        if agent is not None and agent.work_channel_id is not None:
            channel = await tx.get_channel(agent.work_channel_id, for_update=True)
            if channel is not None and channel.status == "active":
                t = tx.table("tasks").c
                busy = await tx.select(
                    "tasks", t.channel_id == channel.id, t.status == "running", limit=1
                )
                trigger = await self.channels.append(
                    tx,
                    channel.id,
                    sender_id=MODERATOR_ID,
                    sender_kind="moderator",
                    content=mt.minutes_message(meeting.topic, record.text),
                    trigger=not busy,
                    metadata={"meeting_id": meeting.id, "minutes": True},
                )
                if not busy:
                    await self.tasks.start_task(tx, channel, trigger)
        return record.model_copy(update={"mail_id": msg.id})
