"""Links between chat-platform users and hub humans (SPEC S6): the one-time codes that prove a
platform user is the human who asked for one, the links they make, and how links end.

A code is stored as its hash only, works once, expires after ``discord_link_code_ttl_s`` and is
deleted then; at most ``discord_link_codes_per_human`` are outstanding per human, a new one
replacing the oldest (a person who lost a code just asks again; the table stays bounded). A link
acts as its human until it is unlinked or the human's token is rotated: the rotation ends the
human's links and codes in its own transaction (:meth:`BridgeLinks.end_all`), and every hub reads
links from the store, so after the commit nothing is relayed as that human on any hub.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from parley.core import bridge as br
from parley.core.bridge import BridgeLink, LinkCode
from parley.core.errors import InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import Principal
from parley.core.ports import Tx
from parley.service.context import ServiceContext


@dataclass(frozen=True)
class IssuedCode:
    """A new link code: shown once, to the one who asked."""

    code: str
    principal_id: str
    expires: datetime
    ttl_s: float


def _require_self_or_operator(caller: Principal, principal_id: str, verb: str) -> None:
    if principal_id != caller.id and not caller.is_operator:
        raise PermissionDenied(
            f"only the operator may {verb} for another principal than yourself ({principal_id!r})",
            code="link_forbidden",
        )


class BridgeLinks:
    """Link codes and links of chat-platform users to hub humans."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    # -- codes -------------------------------------------------------------------------------------
    async def create_code(self, caller: Principal, principal_id: str | None = None) -> IssuedCode:
        """A one-time code that links a platform user to ``principal_id`` (the caller when None):
        a human asks for their own, the operator for any human."""
        target = principal_id or caller.id
        _require_self_or_operator(caller, target, "make a link code")
        code = secrets.token_urlsafe(12)
        now = self.ctx.clock.now()
        ttl_s = self.ctx.settings.discord_link_code_ttl_s
        keep = self.ctx.settings.discord_link_codes_per_human

        async def job(tx: Tx) -> None:
            who: Principal | None = await tx.get("principals", target)
            if who is None or not who.active:
                raise NotFound(f"no principal {target!r}", code="principal_not_found")
            if who.kind != "human":
                raise InvalidRequest(
                    f"{target!r} is an agent; only a human is linked to a chat user",
                    code="link_human_only",
                )
            k = tx.table("bridge_link_codes").c
            held: list[LinkCode] = await tx.select(
                "bridge_link_codes", k.principal_id == target, order_by=[k.created, k.id]
            )
            spent = [row for row in held if row.used or row.expires <= now]
            live = [row for row in held if not (row.used or row.expires <= now)]
            # The oldest go first, so that with this one at most ``keep`` stay outstanding.
            for row in spent + live[: max(0, len(live) - keep + 1)]:
                await tx.delete("bridge_link_codes", row.id)
            tx.insert(
                "bridge_link_codes",
                LinkCode(
                    id=br.code_hash(code),
                    principal_id=target,
                    expires=now + timedelta(seconds=ttl_s),
                    created=now,
                ),
            )

        await self.ctx.store.write(job)
        return IssuedCode(code, target, now + timedelta(seconds=ttl_s), ttl_s)

    async def redeem(self, user_id: str, code: str) -> str | None:
        """Bind the platform user to the human whose code it is, deleting the code; the human's
        id, or None when the code is unknown, used or expired."""
        now = self.ctx.clock.now()
        digest = br.code_hash(code)

        async def job(tx: Tx) -> str | None:
            # Locked, then deleted: a rotation that deletes the human's codes either waits for
            # this link to commit (and then finds and ends it) or commits first (no code left).
            row: LinkCode | None = await tx.get("bridge_link_codes", digest, for_update=True)
            if row is None:
                return None
            await tx.delete("bridge_link_codes", digest)
            if row.used or row.expires <= now:
                return None
            if await tx.get("bridge_links", user_id) is not None:
                await tx.update("bridge_links", user_id, principal_id=row.principal_id)
            else:
                tx.insert(
                    "bridge_links",
                    BridgeLink(id=user_id, principal_id=row.principal_id, created=now),
                )
            self.ctx.events.record(
                tx,
                "bridge.linked",
                actor=row.principal_id,
                subject=f"principal:{row.principal_id}",
                payload={"platform_user_id": user_id},
            )
            return row.principal_id

        return await self.ctx.store.write(job)

    async def sweep_expired(self) -> int:
        """Delete the codes that expired (or were used by an older hub); how many."""
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> int:
            k = tx.table("bridge_link_codes").c
            rows: list[LinkCode] = await tx.select(
                "bridge_link_codes", (k.expires <= now) | k.used.is_(True)
            )
            for row in rows:
                await tx.delete("bridge_link_codes", row.id)
            return len(rows)

        return await self.ctx.store.write(job)

    # -- links -------------------------------------------------------------------------------------
    async def principal_of(self, user_id: str) -> Principal | None:
        """The active human a platform user is linked to, if any."""
        async with self.ctx.store.read() as tx:
            link: BridgeLink | None = await tx.get("bridge_links", user_id)
            if link is None:
                return None
            who: Principal | None = await tx.get("principals", link.principal_id)
        return who if who is not None and who.active else None

    async def links(self, caller: Principal, principal_id: str | None = None) -> list[BridgeLink]:
        """The links of ``principal_id``; without it a human's own, and the operator's view of
        everyone's. Only the operator names another principal."""
        if principal_id is not None:
            _require_self_or_operator(caller, principal_id, "list the links")
        target = principal_id or (None if caller.is_operator else caller.id)
        async with self.ctx.store.read() as tx:
            c = tx.table("bridge_links").c
            where = [] if target is None else [c.principal_id == target]
            return list(await tx.select("bridge_links", *where, order_by=[c.created, c.id]))

    async def unlink(
        self, caller: Principal, *, principal_id: str | None = None, user_id: str | None = None
    ) -> list[BridgeLink]:
        """End links: the one of platform user ``user_id``, or else every link of
        ``principal_id`` (the caller when None). A human ends their own, the operator anyone's;
        a link the caller may not end is answered as one that does not exist."""

        async def job(tx: Tx) -> list[BridgeLink]:
            if user_id is not None:
                link: BridgeLink | None = await tx.get("bridge_links", user_id, for_update=True)
                mine = link is not None and (caller.is_operator or link.principal_id == caller.id)
                if link is None or not mine or principal_id not in (None, link.principal_id):
                    whom = repr(principal_id) if principal_id else "you"
                    if caller.is_operator and not principal_id:
                        whom = "any hub human"
                    raise NotFound(
                        f"platform user {user_id!r} is not linked to {whom}; list the links "
                        "with `parley discord links`",
                        code="link_not_found",
                    )
                ended = [link]
            else:
                target = principal_id or caller.id
                _require_self_or_operator(caller, target, "unlink")
                if await tx.get("principals", target) is None:
                    raise NotFound(f"no principal {target!r}", code="principal_not_found")
                c = tx.table("bridge_links").c
                ended = list(
                    await tx.select("bridge_links", c.principal_id == target, order_by=[c.id])
                )
            for link in ended:
                await self._end(tx, link, actor=caller.id, reason="unlinked")
            return ended

        return await self.ctx.store.write(job)

    async def end_all(self, tx: Tx, principal_id: str, actor: str) -> None:
        """The principal's token was rotated, in ``tx``: end its links and outstanding codes
        with it. Codes go first: a link being made with one of them commits before this
        statement passes its locked code, so the links read next include it."""
        k = tx.table("bridge_link_codes").c
        for code in await tx.select("bridge_link_codes", k.principal_id == principal_id):
            await tx.delete("bridge_link_codes", code.id)
        c = tx.table("bridge_links").c
        for link in await tx.select("bridge_links", c.principal_id == principal_id):
            await self._end(tx, link, actor=actor, reason="token_rotated")

    async def _end(self, tx: Tx, link: BridgeLink, *, actor: str, reason: str) -> None:
        await tx.delete("bridge_links", link.id)
        self.ctx.events.record(
            tx,
            "bridge.unlinked",
            actor=actor,
            subject=f"principal:{link.principal_id}",
            payload={"platform_user_id": link.id, "reason": reason},
        )
