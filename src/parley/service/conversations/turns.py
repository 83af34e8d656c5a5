"""Remote agents' turns (W9 ``remote``): the hub records a pending turn, pushes it (an inbox
notice and a live event on ``turns:<agent>``) and waits for ``speak`` / ``no_reply`` until the
deadline. A missed deadline follows the channel's policy: ``fail`` (C11, the member is named) or
``no_reply``. An answer to a superseded turn is refused with ``new_message`` (C10)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from parley.core.channels import PendingTurn
from parley.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    RuntimeFailure,
)
from parley.core.identity import Principal
from parley.core.ports import Subscription, Tx
from parley.core.runtime import NO_REPLY, Turn, TurnResult
from parley.service.context import ServiceContext
from parley.service.conversations.transcripts import check_content
from parley.service.identity import TOKENS_REVOKED, revocation_topic, token_revoked
from parley.service.mail.mailbox import Mail

MAX_WAIT_S = 300.0


def turns_topic(agent_id: str) -> str:
    return f"turns:{agent_id}"


def answer_topic(turn_id: str) -> str:
    """Where an answer to a turn is announced: the hub that offered the turn may not be the one
    the agent answers through."""
    return f"answer:{turn_id}"


class Turns:
    """Pending turns of remote agents."""

    def __init__(self, ctx: ServiceContext, mail: Mail) -> None:
        self.ctx = ctx
        self.mail = mail

    # -- the hub side: offer a turn and wait ----------------------------------------------------
    async def offer(self, turn: Turn) -> TurnResult:
        if turn.cancel.is_set():
            # Superseded before it was offered: no pending turn and no notice for a dead turn.
            raise RuntimeFailure(
                f"the turn of {turn.agent.id!r} was superseded before it was offered",
                reason="cancelled",
                model_route=f"remote:{turn.agent.id}",
            )
        now = self.ctx.clock.now()
        pending = PendingTurn(
            id=turn.invocation_id,
            agent_id=turn.agent.id,
            channel_id=turn.channel_id,
            task_id=turn.task_id,
            round=turn.round,
            prompt={
                "system": turn.prompt.system,
                "user": turn.prompt.user_text(),
                "text": turn.prompt.render(),
            },
            deadline=now + timedelta(seconds=turn.timeout_s),
            created=now,
        )
        # Subscribe before the turn is offered, so an answer through any hub is heard.
        sub = self.ctx.bus.subscribe([answer_topic(pending.id)])

        async def job(tx: Tx) -> None:
            tx.insert("pending_turns", pending)
            await self.mail.deliver_system(
                tx,
                pending.agent_id,
                "notice",
                f"Your turn in channel {turn.channel_id} (round {turn.round or 1})",
                "Call wait_for_turn (MCP) or GET /v1/turns/next to get the prompt, then answer "
                f"with speak or no_reply before {pending.deadline.isoformat()}.",
                {"turn_id": pending.id, "channel_id": turn.channel_id, "round": turn.round},
            )
            data = {"type": "turn", "turn": pending.model_dump(mode="json")}
            topic = turns_topic(pending.agent_id)
            self.ctx.bus.publish_on_commit(tx, topic, data)

        try:
            await self.ctx.store.write(job)
            answer = asyncio.ensure_future(self._answered(pending.id, sub))
            cancelled: asyncio.Future[Any] = asyncio.ensure_future(turn.cancel.wait())
            both: set[asyncio.Future[Any]] = {answer, cancelled}
            try:
                done, _ = await asyncio.wait(
                    both, timeout=turn.timeout_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                cancelled.cancel()
                answer.cancel()
            if answer in done:
                return TurnResult(text=answer.result(), model_route=f"remote:{turn.agent.id}")
            if cancelled in done:
                # A discussion turn is cancelled by a newer message; a meeting turn (it has no
                # task) by a stop of the meeting: its answer is refused as cancelled.
                await self._close(
                    pending.id, "superseded" if turn.task_id is not None else "cancelled"
                )
                raise RuntimeFailure(
                    f"the turn of {turn.agent.id!r} was superseded or cancelled",
                    reason="cancelled",
                    model_route=f"remote:{turn.agent.id}",
                )
            await self._close(pending.id, "expired")
            channel = None
            async with self.ctx.store.read() as tx:
                channel = await tx.get("channels", turn.channel_id)
            if channel is not None and channel.missed_turn_policy == "no_reply":
                return TurnResult(text=NO_REPLY, model_route=f"remote:{turn.agent.id}")
            raise RuntimeFailure(
                f"{turn.agent.id!r} did not answer its turn within {turn.timeout_s:g}s",
                reason="timeout",
                member=turn.agent.id,
                model_route=f"remote:{turn.agent.id}",
            )
        finally:
            await sub.close()

    async def _answered(self, turn_id: str, sub: Subscription) -> str:
        """The answer to the turn once it is stored; an announcement is only a nudge to look."""
        while True:
            await sub.get()
            async with self.ctx.store.read() as tx:
                row: PendingTurn | None = await tx.get("pending_turns", turn_id)
            if row is not None and row.status == "answered" and row.answer is not None:
                return row.answer

    async def _close(self, turn_id: str, status: str) -> None:
        async def job(tx: Tx) -> None:
            row = await tx.get("pending_turns", turn_id, for_update=True)
            if row is not None and row.status == "pending":
                await tx.update("pending_turns", turn_id, status=status)

        with contextlib.suppress(Exception):
            await self.ctx.store.write(job)

    # -- the agent side ---------------------------------------------------------------------------
    async def next(self, caller: Principal, timeout_s: float) -> PendingTurn | None:
        """The caller's oldest pending turn, waiting up to ``timeout_s`` for one to arrive."""
        if not 0 <= timeout_s <= MAX_WAIT_S:
            raise InvalidRequest(
                f"timeout_s must be between 0 and {MAX_WAIT_S:g}", code="invalid_timeout"
            )
        # Subscribe before looking, so a turn offered in between is not missed.
        # A rotation of the caller's tokens ends the wait before it takes a turn.
        sub = self.ctx.bus.subscribe([turns_topic(caller.id), revocation_topic(caller.id)])
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while True:
                found = await self._oldest_pending(caller.id)
                remaining = deadline - loop.time()
                if found is not None or remaining <= 0:
                    return found
                # An event is only a nudge: the turn it announced may already be superseded,
                # so look again and keep waiting until the deadline.
                try:
                    event = await asyncio.wait_for(sub.get(), remaining)
                except TimeoutError:
                    return None
                if event.get("type") == TOKENS_REVOKED:
                    raise token_revoked(caller.id)
        finally:
            await sub.close()

    async def _oldest_pending(self, agent_id: str) -> PendingTurn | None:
        now = self.ctx.clock.now()
        async with self.ctx.store.read() as tx:
            p = tx.table("pending_turns").c
            rows = await tx.select(
                "pending_turns",
                p.agent_id == agent_id,
                p.status == "pending",
                p.deadline > now,
                order_by=[p.created, p.id],
                limit=1,
            )
        return rows[0] if rows else None

    async def current_channel(self, caller: Principal) -> str:
        """The channel of the caller's latest pending or answered turn: where a remote agent
        "is" when it calls a tool that acts on its current channel (discuss_callback)."""
        async with self.ctx.store.read() as tx:
            p = tx.table("pending_turns").c
            rows: list[PendingTurn] = await tx.select(
                "pending_turns",
                p.agent_id == caller.id,
                p.status.in_(("pending", "answered")),
                order_by=[p.created.desc(), p.id.desc()],
                limit=1,
            )
        if not rows:
            raise NotFound(
                f"{caller.id!r} has no turn yet, so there is no current channel; pass the "
                "discussion channel id explicitly",
                code="no_current_channel",
            )
        return rows[0].channel_id

    async def speak(self, caller: Principal, turn_id: str, text: str) -> PendingTurn:
        if not text.strip():
            raise InvalidRequest(
                "the answer is empty; call no_reply to pass your turn", code="empty_message"
            )
        # The answer becomes a channel message: the same limits as a post apply.
        check_content(text, "the answer", self.ctx.settings.message_max_bytes)
        return await self._answer(caller, turn_id, text)

    async def no_reply(self, caller: Principal, turn_id: str) -> PendingTurn:
        return await self._answer(caller, turn_id, NO_REPLY)

    async def _answer(self, caller: Principal, turn_id: str, text: str) -> PendingTurn:
        async def job(tx: Tx) -> tuple[PendingTurn | None, str | None]:
            turn: PendingTurn | None = await tx.get("pending_turns", turn_id, for_update=True)
            if turn is None:
                raise NotFound(f"no turn {turn_id!r}", code="turn_not_found")
            if turn.agent_id != caller.id:
                raise PermissionDenied(
                    f"turn {turn_id!r} belongs to {turn.agent_id!r}, not {caller.id!r}",
                    code="not_your_turn",
                )
            if turn.status != "pending":
                return turn, turn.status
            if turn.deadline <= self.ctx.clock.now():
                await tx.update("pending_turns", turn_id, status="expired")
                return turn, "expired"
            if turn.task_id is not None:
                task = await tx.get("tasks", turn.task_id)
                last = await tx.last_trigger_id(turn.channel_id)
                if task is None or task.cancel_requested or task.trigger_id != last:
                    await tx.update("pending_turns", turn_id, status="superseded")
                    return turn, "superseded"
            await tx.update("pending_turns", turn_id, status="answered", answer=text)
            self.ctx.bus.publish_on_commit(tx, answer_topic(turn_id), {"type": "answered"})
            return turn.model_copy(update={"status": "answered", "answer": text}), None

        turn, refused = await self.ctx.store.write(job)
        if refused == "cancelled" and turn is not None:
            why = await self._cancel_reason(turn)
            raise Conflict(
                f"turn {turn_id!r} was cancelled ({why}); your answer is not posted.",
                code="turn_cancelled",
                reason=why,
            )
        if refused == "superseded":
            raise Conflict(
                f"turn {turn_id!r} was superseded by a newer message; your answer is not posted. "
                "Wait for your next turn.",
                code="new_message",
            )
        if refused is not None:
            raise Conflict(
                f"turn {turn_id!r} is {refused!r}; it can no longer be answered",
                code=f"turn_{refused}",
            )
        assert turn is not None
        return turn

    async def _cancel_reason(self, turn: PendingTurn) -> str:
        """Why a turn was cancelled, as its channel's record tells: a meeting stopped or ended,
        else the hub that offered it stopped."""
        async with self.ctx.store.read() as tx:
            channel = await tx.get_channel(turn.channel_id)
            meeting_id = channel.metadata.get("meeting_id") if channel is not None else None
            meeting = await tx.get("meetings", meeting_id) if meeting_id else None
        if meeting is None:
            return "the hub that offered it stopped or the task was cancelled"
        if meeting.stop_requested or meeting.end_reason == "stopped":
            return f"meeting {meeting.id!r} was stopped"
        if meeting.end_reason == "interrupted":
            return f"the hub driving meeting {meeting.id!r} stopped"
        return f"meeting {meeting.id!r} ended ({meeting.end_reason or 'ending'})"


class RemoteRuntime:
    """The Runtime port for agents that live elsewhere and answer through the API or MCP."""

    kind = "remote"

    def __init__(self, turns: Turns) -> None:
        self.turns = turns

    async def respond(self, turn: Turn) -> TurnResult:
        return await self.turns.offer(turn)

    async def aclose(self) -> None:
        return None
