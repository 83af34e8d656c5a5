"""Export and import of the mailroom directory format (M9); operator only.

Import keeps every field of each message (see ``core/mailroom``); only its inbox position is
the one the hub gives it. A message whose id the hub already holds is
skipped (never overwritten), so importing the same mailroom twice changes nothing the second
time; the result lists what was skipped.

Formatting and parsing files is CPU work proportional to the mail: it runs in a worker thread, so
that the hub keeps answering (``/healthz``, streams) while an export or an import is under way.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping

from parley.core import mailroom
from parley.core.errors import Conflict, InvalidRequest, NotFound
from parley.core.identity import SYSTEM_ID, Principal
from parley.core.limits import check_size, json_bytes, json_problem, preview
from parley.core.mail import FromKind, Message
from parley.core.mailroom import ImportResult
from parley.core.ports import Tx
from parley.service.context import ServiceContext
from parley.service.identity import Identity, require_operator
from parley.service.mail.mailbox import inbox_topic

_ID_CHUNK = 500
# What a sender chose of a message (as in a SendRequest): what the message limit measures.
_SENT_FIELDS = {
    "to_id",
    "kind",
    "subject",
    "body",
    "payload",
    "cc",
    "parent_message_id",
    "correlation_id",
    "related",
    "labels",
    "ttl_seconds",
}


class Mailroom:
    """Turns the whole mail store into mailroom files and mailroom files into mail."""

    def __init__(self, ctx: ServiceContext, identity: Identity) -> None:
        self.ctx = ctx
        self.identity = identity

    async def export(self, caller: Principal) -> dict[str, str]:
        """Every message, open and archived, as ``{relative_path: file_text}``."""
        require_operator(caller, "export the mailroom")
        async with self.ctx.store.read() as tx:
            c = tx.table("messages").c
            rows: list[Message] = await tx.select("messages", order_by=[c.created, c.id])
        return await asyncio.to_thread(mailroom.export_files, rows)

    async def import_files(self, caller: Principal, files: Mapping[str, str]) -> ImportResult:
        """Insert the messages of mailroom files, all or none. Every inbox owner and recipient
        must already exist in the hub."""
        require_operator(caller, "import a mailroom")
        limits = (self.ctx.settings.payload_max_bytes, self.ctx.settings.message_max_bytes)
        parsed = await asyncio.to_thread(_parse_storable, files, *limits)

        async def job(tx: Tx) -> ImportResult:
            existing = await self._existing_ids(tx, [msg.id for msg in parsed.messages])
            fresh = [msg for msg in parsed.messages if msg.id not in existing]
            await self._require_recipients(tx, fresh)
            await self._require_free_idempotency_keys(tx, fresh)
            guessed = parsed.guessed_from_kind
            kinds = {
                sender: await self._from_kind(tx, sender)
                for sender in {x.from_id for x in fresh if x.id in guessed}
            }
            # Inbox positions follow the order the mail had where it came from (its seq), or for
            # files of older exports the time it was sent; an inbox that was empty here gets the
            # very positions it had there.
            for msg in sorted(fresh, key=lambda x: (x.seq == 0, x.seq, x.created, x.id)):
                from_kind = kinds[msg.from_id] if msg.id in guessed else msg.from_kind
                stored = msg.model_copy(update={"from_kind": from_kind})
                tx.deliver_to_inbox(stored, functools.partial(self._announce, tx))
            skipped = sorted(existing)
            self.ctx.events.record(
                tx,
                "mailroom.imported",
                actor=caller.id,
                subject="mailroom",
                payload={"imported": [x.id for x in fresh], "skipped": skipped},
            )
            return ImportResult(
                imported=len(fresh),
                skipped=len(skipped),
                skipped_ids=skipped,
                ignored=parsed.ignored,
            )

        return await self.ctx.store.write(job)

    async def _existing_ids(self, tx: Tx, ids: list[str]) -> set[str]:
        c = tx.table("messages").c
        found: set[str] = set()
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            rows: list[Message] = await tx.select("messages", c.id.in_(chunk))
            found |= {row.id for row in rows}
        return found

    async def _require_free_idempotency_keys(self, tx: Tx, messages: list[Message]) -> None:
        """An original's idempotency key is unique per sender: an imported one that another
        message already holds would make the sender's resend return the wrong message."""
        keyed = [msg for msg in messages if msg.idempotency_key is not None and msg.copy_of is None]
        c = tx.table("messages").c
        # (sender, key) -> the message holding it: the stored ones first, read a chunk at a time.
        held: dict[tuple[str, str | None], str] = {}
        for start in range(0, len(keyed), _ID_CHUNK):
            chunk = keyed[start : start + _ID_CHUNK]
            rows: list[Message] = await tx.select(
                "messages",
                c.copy_of.is_(None),
                c.idempotency_key.in_(sorted({str(msg.idempotency_key) for msg in chunk})),
                c.from_id.in_(sorted({msg.from_id for msg in chunk})),
            )
            held.update({(row.from_id, row.idempotency_key): row.id for row in rows})
        for msg in keyed:
            key = (msg.from_id, msg.idempotency_key)
            holder = held.get(key)
            if holder is not None:
                raise Conflict(
                    f"mailroom message {msg.id!r} from {msg.from_id!r} has idempotency key "
                    f"{msg.idempotency_key!r}, which message {holder!r} already holds; remove "
                    "the 'idempotency_key' line from one of their files and import again",
                    code="idempotency_key_taken",
                    id=msg.id,
                )
            held[key] = msg.id

    async def _require_recipients(self, tx: Tx, messages: list[Message]) -> None:
        missing = [
            rid
            for rid in sorted({msg.recipient_id for msg in messages})
            if await self.identity.get(rid, tx) is None
        ]
        if missing:
            raise NotFound(
                f"the mailroom has mail for {', '.join(repr(x) for x in missing)}, who do not "
                "exist in this hub; create them (`parley agent add <id>`, REST: POST "
                "/v1/agents) and import again",
                code="recipient_not_found",
                recipients=missing,
            )

    async def _from_kind(self, tx: Tx, sender_id: str) -> FromKind:
        if sender_id == SYSTEM_ID:
            return "system"
        found = await self.identity.get(sender_id, tx)
        if found is None:
            return "external"
        return "agent" if found.kind == "agent" else "human"

    def _announce(self, tx: Tx, msg: Message) -> None:
        """Push imported mail to live inbox streams once the import has committed."""
        topic = inbox_topic(msg.recipient_id)
        data = {"type": "mail", "seq": msg.seq, "message": msg.model_dump(mode="json")}
        self.ctx.bus.publish_on_commit(tx, topic, data)


def _parse_storable(
    files: Mapping[str, str], payload_max: int, message_max: int
) -> mailroom.ParsedMailroom:
    """Parse mailroom files and refuse any message the hub would not accept as mail."""
    parsed = mailroom.parse_files(files)
    for msg in parsed.messages:
        _check_storable(msg, payload_max, message_max)
    return parsed


def _check_storable(msg: Message, payload_max: int, message_max: int) -> None:
    """The mailroom format carries any text; the store cannot hold every text (see limits), and
    imported mail is held to the same size limits as mail sent to the hub."""
    problem = json_problem(msg.model_dump(exclude={"payload"})) or json_problem(msg.payload)
    if problem is not None:
        raise InvalidRequest(
            f"mailroom message {preview(msg.id)} {problem}; parley cannot store that, fix its "
            "file and import again",
            code="invalid_mailroom_file",
            id=msg.id,
        )
    what = f"the payload of mailroom message {msg.id!r}"
    check_size(json_bytes(msg.payload), payload_max, what, code="payload_too_large")
    content = msg.model_dump(mode="json", include=_SENT_FIELDS)
    what = f"mailroom message {msg.id!r}"
    check_size(json_bytes(content), message_max, what, code="message_too_large")
