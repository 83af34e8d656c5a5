"""Durable mail (M1–M9): send, inbox, lifecycle, archive, redelivery, threads, summaries, expiry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from parley.core import mail as m
from parley.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    RateLimited,
    StorageError,
)
from parley.core.identity import OPERATOR_ID, Principal
from parley.core.ids import new_ulid
from parley.core.limits import check_size, check_text, json_bytes
from parley.core.mail import InboxFilter, MailSummary, Message, SendRequest
from parley.core.ports import Page, Tx
from parley.service.context import ServiceContext
from parley.service.identity import (
    TOKENS_REVOKED,
    Identity,
    require_operator,
    revocation_topic,
    token_revoked,
)
from parley.service.mail.delivery_marks import DeliveryMarks
from parley.service.quotas import Ticket

THREAD_DEPTH = 50
MAX_WAIT_S = 300.0


def inbox_topic(principal_id: str) -> str:
    return f"inbox:{principal_id}"


@dataclass(frozen=True)
class Sent:
    """What a send did: the message, and whether it is the original of an idempotent resend
    (``replayed``) rather than mail sent just now."""

    message: Message
    replayed: bool


def _from_kind(p: Principal) -> m.FromKind:
    return "agent" if p.kind == "agent" else "human"


class Mail:
    """The mail service. Every method takes the authenticated caller first."""

    def __init__(self, ctx: ServiceContext, identity: Identity) -> None:
        self.ctx = ctx
        self.identity = identity
        self._marks = DeliveryMarks(ctx)

    # -- sending ------------------------------------------------------------------------------
    async def send(self, caller: Principal, req: SendRequest) -> Sent:
        """Send mail as ``caller`` (never as anyone else). With an idempotency key, a resend
        returns the original message instead of a duplicate (M6), and says so (``replayed``)
        for a surface to tell the caller (REST: 200 and a header instead of 201)."""
        kind = m.check_kind(req.kind)
        to_kind, to_id = m.parse_address(req.to)
        for cc in req.cc:
            if ":" in cc or cc in ("*", "all"):
                raise InvalidRequest(
                    f"cc entry {cc!r} must be an agent or human id", code="invalid_cc"
                )
        size = req.checked_size(
            payload_max=self.ctx.settings.payload_max_bytes,
            message_max=self.ctx.settings.message_max_bytes,
        )
        ticket = self.ctx.quotas.ticket(caller)
        try:
            return await self.ctx.store.write(
                lambda tx: self._send_job(tx, caller, req, kind, to_kind, to_id, size, ticket)
            )
        except StorageError:
            ticket.refund()
            if req.idempotency_key is None:
                raise
            # Two hubs raced on the same key and the unique index refused the loser: the
            # original now exists, so the resend returns it.
            async with self.ctx.store.read() as tx:
                existing = await tx.message_by_idempotency(caller.id, req.idempotency_key)
            if existing is None:
                raise
            return Sent(existing, replayed=True)
        except Exception:
            # Nothing was stored. A cancelled request keeps its charge: its job may still commit.
            ticket.refund()
            raise

    async def _send_job(
        self,
        tx: Tx,
        caller: Principal,
        req: SendRequest,
        kind: m.MailKind,
        to_kind: m.ToKind,
        to_id: str,
        size: int,
        ticket: Ticket,
    ) -> Sent:
        if req.idempotency_key is not None:
            existing = await tx.message_by_idempotency(caller.id, req.idempotency_key)
            if existing is not None:
                return Sent(existing, replayed=True)
        now = self.ctx.clock.now()
        recipients = await self._recipients(tx, caller, to_kind, to_id, now)
        copies: list[tuple[str, m.CopyReason | None]] = [(recipients[0], None)]
        reason: m.CopyReason = "broadcast" if to_kind == "broadcast" else "channel"
        copies += [(r, reason) for r in recipients[1:]]
        seen = set(recipients)
        for cc in req.cc:
            await self._require_recipient(tx, cc)
            if cc not in seen:
                copies.append((cc, "cc"))
                seen.add(cc)
        # A blocker always reaches the operator, whoever it was addressed to (M4).
        if kind == "blocker" and OPERATOR_ID not in seen:
            copies.append((OPERATOR_ID, "blocker"))
        # Every copy is a stored row: a send with 64 cc stores 65 times its size.
        ticket.charge(messages=1, nbytes=size * len(copies))
        primary_id = new_ulid()
        primary: Message | None = None
        for recipient, copy_reason in copies:
            msg = Message(
                id=primary_id if primary is None else new_ulid(),
                created=now,
                ttl_seconds=req.ttl_seconds,
                from_kind=_from_kind(caller),
                from_id=caller.id,
                to_kind=to_kind,
                to_id=to_id,
                recipient_id=recipient,
                cc=list(req.cc),
                kind=kind,
                subject=req.subject,
                body=req.body,
                payload=req.payload,
                parent_message_id=req.parent_message_id,
                correlation_id=req.correlation_id,
                related=list(req.related),
                labels=list(req.labels),
                idempotency_key=req.idempotency_key if primary is None else None,
                copy_of=None if primary is None else primary_id,
                copy_reason=copy_reason,
            )
            primary = primary or msg
            self._deliver(tx, msg)
        assert primary is not None
        self.ctx.events.record(
            tx,
            "mail.sent",
            actor=caller.id,
            subject=f"message:{primary_id}",
            payload={
                "kind": kind,
                "to": f"{to_kind}:{to_id}",
                "recipients": [r for r, _ in copies],
            },
            trace_id=req.correlation_id,
        )
        return Sent(primary, replayed=False)

    async def deliver_system(
        self,
        tx: Tx,
        recipient_id: str,
        kind: m.MailKind,
        subject: str,
        body: str = "",
        payload: dict[str, Any] | None = None,
        ttl_seconds: int = m.DEFAULT_TTL_SECONDS,
        *,
        session_id: str | None = None,
        from_id: str = "system",
        correlation_id: str | None = None,
    ) -> Message:
        """Mail from the hub itself (turn notices, wake notices, a worker's task-dispatch and
        task-result) inside an open transaction. It has no quota, but the same size limits as
        anyone's mail: its texts are small. With ``session_id`` it is addressed to that session
        of the recipient (M5); ``from_id`` names the worker or principal it speaks for."""
        check_size(
            json_bytes({"subject": subject, "body": body, "payload": payload or {}}),
            self.ctx.settings.message_max_bytes,
            f"the hub's own {kind!r} mail to {recipient_id!r}",
            code="message_too_large",
        )
        msg = Message(
            id=new_ulid(),
            created=self.ctx.clock.now(),
            ttl_seconds=ttl_seconds,
            from_kind="system",
            from_id=from_id,
            to_kind="session" if session_id else "agent",
            to_id=session_id or recipient_id,
            recipient_id=recipient_id,
            kind=kind,
            subject=subject,
            body=body,
            payload=payload or {},
            correlation_id=correlation_id,
        )
        self._deliver(tx, msg)
        to = f"session:{session_id}" if session_id else f"agent:{recipient_id}"
        self.ctx.events.record(
            tx,
            "mail.sent",
            actor="system",
            subject=f"message:{msg.id}",
            payload={"kind": kind, "to": to, "recipients": [recipient_id]},
        )
        return msg

    def _deliver(self, tx: Tx, msg: Message) -> None:
        """Store ``msg`` in its recipient's inbox and publish it once committed. Its position
        (``seq``) is set just before the commit, with every other message's of the
        transaction (``Tx.deliver_to_inbox``)."""

        def placed(msg: Message) -> None:
            data = {"type": "mail", "seq": msg.seq, "message": msg.model_dump(mode="json")}
            self._announce(tx, msg.recipient_id, data)

        tx.deliver_to_inbox(msg, placed)

    def _announce(self, tx: Tx, recipient_id: str, data: dict[str, Any]) -> None:
        """Publish to the recipient's inbox topic once the transaction has committed."""
        topic = inbox_topic(recipient_id)
        self.ctx.bus.publish_on_commit(tx, topic, data)

    async def _require_recipient(self, tx: Tx, principal_id: str) -> Principal:
        found = await self.identity.get(principal_id, tx)
        if found is None or not found.active:
            raise NotFound(
                f"recipient {principal_id!r} does not exist; list agents with `parley agent list` "
                "(REST: GET /v1/agents)",
                code="recipient_not_found",
                recipient=principal_id,
            )
        return found

    async def _recipients(
        self, tx: Tx, caller: Principal, to_kind: m.ToKind, to_id: str, now: Any
    ) -> list[str]:
        if to_kind == "agent":
            await self._require_recipient(tx, to_id)
            return [to_id]
        if to_kind == "session":
            session = await tx.get("sessions", to_id)
            if session is None:
                raise NotFound(f"no session {to_id!r}", code="session_not_found")
            return [session.agent_id]
        if to_kind == "channel":
            channel = await tx.get_channel(to_id)
            if channel is None or channel.status == "deleted":
                raise NotFound(f"no channel {to_id!r}", code="channel_not_found")
            # Mail to a channel fans out to its members: from an outsider it would reach a
            # private group and, through the copies, tell who is in it. The refusal names nobody.
            if not (caller.is_operator or caller.id in channel.members):
                raise PermissionDenied(
                    f"{caller.id!r} is not a member of channel {to_id!r}; only its members and "
                    "the operator may address mail to a channel. Write to an agent directly, or "
                    "ask a member to invite you.",
                    code="not_channel_member",
                )
            members = [mid for mid in channel.members if mid != caller.id]
            if not members:
                raise InvalidRequest(
                    f"channel {to_id!r} has no member besides you to deliver to",
                    code="no_recipients",
                )
            return members
        # Broadcast: all active agents but the sender, at most once per interval per sender.
        await tx.get("principals", caller.id, for_update=True)
        interval = self.ctx.settings.broadcast_interval_s
        last = await tx.last_broadcast_at(caller.id)
        if last is not None and interval > 0:
            wait = (last + timedelta(seconds=interval) - now).total_seconds()
            if wait > 0:
                raise RateLimited(
                    f"{caller.id!r} broadcast less than {interval:g}s ago; retry in {wait:.1f}s",
                    retry_after=round(wait, 3),
                )
        p = tx.table("principals").c
        agents = await tx.select(
            "principals", p.kind == "agent", p.active.is_(True), p.id != caller.id, order_by=[p.id]
        )
        if not agents:
            raise InvalidRequest(
                "there is no other active agent to broadcast to", code="no_recipients"
            )
        return [a.id for a in agents]

    # -- reading ------------------------------------------------------------------------------
    def _check_inbox_owner(self, caller: Principal, owner: str) -> None:
        if caller.id != owner and not caller.is_operator:
            raise PermissionDenied(
                f"{caller.id!r} may not read the inbox of {owner!r}; agents read only their own "
                "inbox (anyone may send to it)",
                code="inbox_forbidden",
            )

    async def inbox(self, caller: Principal, owner: str, flt: InboxFilter) -> list[Message]:
        """The inbox of ``owner`` in delivery order; the owner fetching it marks pending mail
        delivered. One page: see ``inbox_page``."""
        return (await self.inbox_page(caller, owner, flt)).rows

    async def inbox_page(self, caller: Principal, owner: str, flt: InboxFilter) -> Page[Message]:
        """A page of the inbox of ``owner``: at most ``flt.limit`` messages, and no more once
        they hold the hub's page budget in bytes; ``more`` says whether mail follows it."""
        self._check_inbox_owner(caller, owner)
        for what, value in (("kind", flt.kind), ("from", flt.from_id), ("label", flt.label)):
            if value is not None:
                check_text(value, what)
        for status in flt.status or ():
            check_text(status, "status")
        m.check_status_filter(flt.status)
        if flt.kind is not None:
            m.check_kind(flt.kind)
        await self.identity.require(owner)
        flt = flt.model_copy(update={"since": m.check_since(flt.since)})
        async with self.ctx.store.read() as tx:
            page = await tx.inbox_page(owner, flt, max_bytes=self.ctx.settings.page_max_bytes)
        rows = page.rows
        if caller.id == owner:
            pending = [r.id for r in rows if r.status == "pending"]
            if pending:
                now = await self.mark_delivered(owner, pending)
                rows = [
                    r.model_copy(update={"status": "delivered", "delivered_at": now})
                    if r.status == "pending"
                    else r
                    for r in rows
                ]
        return Page(rows, page.more)

    async def wait(
        self, caller: Principal, timeout_s: float, *, owner: str | None = None
    ) -> list[Message]:
        """Long poll: the mail not yet delivered to ``owner`` (the caller by default), returned
        as soon as there is some, or ``[]`` once ``timeout_s`` has passed without any."""
        owner = owner or caller.id
        self._check_inbox_owner(caller, owner)
        if not 0 <= timeout_s <= MAX_WAIT_S:
            raise InvalidRequest(
                f"timeout_s {timeout_s!r} is out of range; wait between 0 and {MAX_WAIT_S:g} "
                "seconds, and wait again if nothing came",
                code="invalid_timeout",
            )
        await self.identity.require(owner)
        undelivered = InboxFilter(status=["pending"])
        # Subscribe before reading the store: mail committed between the read and the
        # subscription would otherwise sit unnoticed until the next message arrives.
        # A rotation of the caller's tokens ends the wait before it takes any more mail.
        sub = self.ctx.bus.subscribe([inbox_topic(owner), revocation_topic(caller.id)])
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while True:
                found = await self.inbox(caller, owner, undelivered)
                remaining = deadline - loop.time()
                if found or remaining <= 0:
                    return found
                try:
                    # Any inbox event is only a nudge; the store decides what is new.
                    event = await asyncio.wait_for(sub.get(), remaining)
                except TimeoutError:
                    return []
                if event.get("type") == TOKENS_REVOKED:
                    raise token_revoked(caller.id)
        finally:
            await sub.close()

    async def mark_delivered(self, owner: str, ids: list[str]) -> datetime:
        """Mark pending mail delivered; returns the delivery time (see ``DeliveryMarks``)."""
        if not ids:
            return self.ctx.clock.now()
        return await self._marks.mark(owner, ids)

    def _check_visible(self, caller: Principal, msg: Message) -> None:
        if _may_read(caller, msg):
            return
        # Name no inbox: the refusal must not tell a stranger (or the sender of a copy) who
        # received the message.
        raise PermissionDenied(
            f"{caller.id!r} may not read message {msg.id!r}; only its recipient and the operator "
            "may, and its sender the original it sent (not the recipients' copies)",
            code="message_forbidden",
        )

    async def get(self, caller: Principal, message_id: str) -> Message:
        async with self.ctx.store.read() as tx:
            msg: Message | None = await tx.get("messages", message_id)
        if msg is None:
            raise NotFound(f"no message {message_id!r}", code="message_not_found")
        self._check_visible(caller, msg)
        return msg

    async def thread(self, caller: Principal, message_id: str) -> list[Message]:
        """The thread around a message: its reply chain (parent_message_id), its transaction
        (correlation_id) and what it relates to (related[]), as far as the caller may see."""
        start = await self.get(caller, message_id)
        async with self.ctx.store.read() as tx:
            ids = {start.id, *(start.related)}
            correlation = {start.correlation_id} if start.correlation_id else set()
            root = start
            for _ in range(THREAD_DEPTH):
                if root.parent_message_id is None:
                    break
                parent: Message | None = await tx.get("messages", root.parent_message_id)
                if parent is None:
                    break
                ids.add(parent.id)
                root = parent
            found: dict[str, Message] = {}
            for _ in range(THREAD_DEPTH):
                rows = await tx.thread_messages(ids, correlation)
                new = {r.id: r for r in rows if r.id not in found}
                if not new:
                    break
                found.update(new)
                ids |= set(new)
                correlation |= {r.correlation_id for r in new.values() if r.correlation_id}
        visible = [msg for msg in found.values() if _may_read(caller, msg)]
        return sorted(visible, key=lambda x: (x.created, x.id))

    async def summary(self, caller: Principal, owner: str) -> MailSummary:
        self._check_inbox_owner(caller, owner)
        await self.identity.require(owner)
        async with self.ctx.store.read() as tx:
            return await tx.summary(owner, self.ctx.clock.now())

    # -- lifecycle ----------------------------------------------------------------------------
    async def update_status(
        self, caller: Principal, message_id: str, status: str, *, label: str | None = None
    ) -> Message:
        """Move one's own message forward: read → in_progress → closed (closing archives it,
        optionally under a label). The operator manages everyone's mail the same way (M4, the
        seed's CEO); the event names who acted and whose mail it is. Nobody deletes mail (M3)."""
        if label is not None:
            check_text(label, "label")

        async def job(tx: Tx) -> Message:
            msg: Message | None = await tx.get("messages", message_id, for_update=True)
            if msg is None:
                raise NotFound(f"no message {message_id!r}", code="message_not_found")
            if msg.recipient_id != caller.id and not caller.is_operator:
                raise PermissionDenied(
                    f"only the recipient {msg.recipient_id!r} (or the operator) may change the "
                    f"status of message {message_id!r}",
                    code="not_recipient",
                )
            if msg.status == "expired":
                raise Conflict(
                    f"message {message_id!r} expired at {msg.expires_at.isoformat()}",
                    code="message_expired",
                )
            m.check_transition(msg.status, status)
            now = self.ctx.clock.now()
            values: dict[str, Any] = {"status": status}
            if msg.delivered_at is None:
                values["delivered_at"] = now
            if status in ("read", "in_progress", "closed") and msg.read_at is None:
                values["read_at"] = now
            if status in ("in_progress", "closed") and msg.consumed_at is None:
                values["consumed_at"] = now
            if status == "closed":
                values["closed_at"] = now
                values["archive_label"] = label or _wave(msg) or "unlabelled"
            await tx.update("messages", message_id, **values)
            self.ctx.events.record(
                tx,
                "mail.status_changed",
                actor=caller.id,
                subject=f"message:{message_id}",
                payload={
                    "from": msg.status,
                    "to": status,
                    "label": values.get("archive_label"),
                    "owner": msg.recipient_id,
                },
            )
            return msg.model_copy(update=values)

        return await self.ctx.store.write(job)

    async def archive(self, caller: Principal, message_id: str, label: str | None) -> Message:
        return await self.update_status(caller, message_id, "closed", label=label)

    async def redeliver(self, caller: Principal, message_id: str) -> Message:
        """Operator only: put a copy of an archived message back in the inbox as pending; the
        original stays archived (M3)."""
        require_operator(caller, "redeliver mail")

        async def job(tx: Tx) -> Message:
            original: Message | None = await tx.get("messages", message_id)
            if original is None:
                raise NotFound(f"no message {message_id!r}", code="message_not_found")
            if original.status != "closed":
                raise Conflict(
                    f"message {message_id!r} is {original.status!r}; only archived (closed) "
                    "mail can be redelivered",
                    code="not_archived",
                )
            copy = original.model_copy(
                update={
                    "id": new_ulid(),
                    "created": self.ctx.clock.now(),
                    "status": "pending",
                    "delivered_at": None,
                    "read_at": None,
                    "consumed_at": None,
                    "closed_at": None,
                    "archive_label": None,
                    "failure_reason": None,
                    "idempotency_key": None,
                    "copy_of": original.id,
                    "copy_reason": "redeliver",
                }
            )
            self._deliver(tx, copy)
            self.ctx.events.record(
                tx,
                "mail.redelivered",
                actor=caller.id,
                subject=f"message:{original.id}",
                payload={"copy": copy.id},
            )
            return copy

        return await self.ctx.store.write(job)

    async def expire_due(self) -> list[Message]:
        """Mark mail whose TTL has passed as expired; it is kept, never dropped (M6)."""
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> list[Message]:
            due = await tx.expire_due(now)
            for msg in due:
                self.ctx.events.record(
                    tx, "mail.expired", actor="system", subject=f"message:{msg.id}"
                )
                self._announce(tx, msg.recipient_id, {"type": "mail.expired", "id": msg.id})
            return due

        return await self.ctx.store.write(job)


def _may_read(caller: Principal, msg: Message) -> bool:
    """The recipient and the operator read a message; its sender reads the original it sent,
    but not the per-recipient copies of a channel, broadcast or cc send: together they would
    list every recipient, e.g. the members of a private channel."""
    if caller.is_operator or caller.id == msg.recipient_id:
        return True
    return caller.id == msg.from_id and msg.copy_of is None


def _wave(msg: Message) -> str | None:
    for label in msg.labels:
        if label.startswith("wave:"):
            return label[len("wave:") :]
    return None
