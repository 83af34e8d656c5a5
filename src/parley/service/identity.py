"""Agents, humans and their tokens. Tokens are stored hashed and shown once."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from parley.core import consent
from parley.core.channels import Channel, LogicalSession
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied, Unauthenticated
from parley.core.identity import (
    OPERATOR_ID,
    Principal,
    PrincipalKind,
    TokenRecord,
    hash_token,
    new_token,
    validate_slug,
)
from parley.core.ids import new_id, new_ulid
from parley.core.limits import (
    OptionalStorableText,
    StorableObject,
    StorableText,
    check_text,
)
from parley.core.ports import Tx
from parley.core.rooms import MEETING_STATES, RoomMember
from parley.core.runtime import RUNTIME_KINDS
from parley.service.context import ServiceContext
from parley.service.turn_access import TurnAccess, TurnBinding


class AgentSpec(BaseModel):
    """What an operator gives to create an agent."""

    id: str = Field(min_length=1, max_length=63)
    display_name: OptionalStorableText = Field(default=None, max_length=200)
    workspace: OptionalStorableText = Field(default=None, max_length=4096)
    persona: StorableText = Field(default="", max_length=20_000)
    runtime: StorableObject = Field(default_factory=lambda: {"kind": "none"})
    # Who may add the agent to channels without an invitation; nobody by default (core/consent).
    accepts_channels_from: list[StorableText] = Field(default_factory=list, max_length=200)


class AgentPatch(BaseModel):
    """What an operator may change of an agent; a field left out stays as it is."""

    display_name: StorableText | None = Field(default=None, min_length=1, max_length=200)
    workspace: StorableText | None = Field(default=None, max_length=4096)
    persona: StorableText | None = Field(default=None, max_length=20_000)
    runtime: StorableObject | None = None
    accepts_channels_from: list[StorableText] | None = Field(default=None, max_length=200)


class HumanSpec(BaseModel):
    id: str = Field(min_length=1, max_length=63)
    display_name: OptionalStorableText = Field(default=None, max_length=200)
    operator: bool = False


class Created(BaseModel):
    """A new principal and its token. The token is shown only here."""

    principal: Principal
    token: str
    work_channel_id: str | None = None


log = logging.getLogger("parley.identity")

MAX_LABEL_CHARS = 100


def check_label(label: str) -> str:
    """A token's label: what it is for (``claude-code``, ``ci``), shown by ``token list``."""
    label = check_text(label, "label").strip()
    if not label or len(label) > MAX_LABEL_CHARS:
        raise InvalidRequest(
            f"a token label has 1 to {MAX_LABEL_CHARS} characters, e.g. 'claude-code' or 'ci'",
            code="invalid_label",
            field="label",
        )
    return label


TOKENS_REVOKED = "tokens_revoked"
TOUCH_EVERY_S = 60.0
"""How stale a token's stored ``last_used`` may get: one write a minute per token in use, not
one per request."""
# What else a rotation ends, in the rotation's own transaction: (tx, principal id, actor).
RotationHook = Callable[[Tx, str, str], Awaitable[None]]
# Changes of principals and rotations of their tokens, for the caches of every hub.
PRINCIPALS_TOPIC = "principals"


def revocation_topic(principal_id: str) -> str:
    """The bus topic on which a principal's token revocations are announced."""
    return f"principal:{principal_id}"


def token_revoked(principal_id: str) -> Unauthenticated:
    """The refusal of a request, stream or long poll whose token was revoked while it ran."""
    return Unauthenticated(
        f"the token of {principal_id!r} was revoked while this request was open; reconnect "
        "with the principal's new token",
        code="token_revoked",
    )


def require_operator(caller: Principal, action: str) -> None:
    if not caller.is_operator:
        raise PermissionDenied(
            f"only the operator may {action}; {caller.id!r} is not the operator",
            code="operator_only",
        )


def _require_self_or_operator(caller: Principal, agent_id: str, verb: str) -> None:
    """Whom an agent accepts channels from is the agent's and the operator's business alone."""
    if not (caller.is_operator or caller.id == agent_id):
        raise PermissionDenied(
            f"{caller.id!r} may not {verb} whom {agent_id!r} accepts channels from; only the "
            "agent itself and the operator may",
            code="consent_forbidden",
        )


def check_runtime(runtime: dict[str, Any]) -> dict[str, Any]:
    kind = runtime.get("kind", "none")
    if kind not in RUNTIME_KINDS:
        raise InvalidRequest(
            f"runtime kind {kind!r} is unknown; use one of {', '.join(RUNTIME_KINDS)}",
            code="unknown_runtime",
        )
    return {**runtime, "kind": kind}


class Identity:
    """Creates principals and turns bearer tokens into principals."""

    def __init__(
        self,
        ctx: ServiceContext,
        validate_runtime: Callable[[dict[str, Any]], None] | None = None,
        rotation_ends: Sequence[RotationHook] = (),
        on_operator_rotated: Callable[[str], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self._validate_runtime = validate_runtime
        self._rotation_ends = tuple(rotation_ends)
        self._principals: dict[str, Principal] = {}
        self._tokens: dict[str, str] = {}
        # Called with the operator's new token after its old ones were revoked, so that the
        # hub can rewrite the token file the CLI reads (the service layer knows no files).
        self.on_operator_rotated = on_operator_rotated
        self._revocations = 0
        self.turn_access = TurnAccess()
        """The tokens of this hub's running CLI turns (:mod:`parley.service.turn_access`)."""
        # When this hub last wrote each token's ``last_used`` (see ``_touch``).
        self._touched: dict[str, datetime] = {}

    # -- lookups ------------------------------------------------------------------------------
    async def authenticate(self, token: str | None) -> Principal:
        """The principal a bearer token belongs to; the server decides who is speaking."""
        if not token:
            raise Unauthenticated(
                "no bearer token was given; send 'Authorization: Bearer <token>' (the operator "
                "issues one with 'parley token issue <agent>')",
                code="missing_token",
            )
        return await self.authenticate_digest(hash_token(token))

    async def authenticate_digest(self, digest: str) -> Principal:
        """The principal whose token has this digest: how a web session, which keeps only the
        digest of the token it was signed in with, finds out whether that token still holds.
        A running CLI turn's token (:mod:`parley.service.turn_access`) holds while its turn runs."""
        bound = self.turn_access.binding(digest)
        if bound is not None:
            return await self._turn_principal(bound)
        pid = self._tokens.get(digest)
        if pid is not None and pid in self._principals:
            await self._touch(digest)
            return self._principals[pid]
        revocations = self._revocations
        async with self.ctx.store.read() as tx:
            principal = await tx.principal_by_token(digest)
        if principal is None or not principal.active:
            raise Unauthenticated(
                "the bearer token is not valid: it is unknown, revoked or belongs to a "
                "deactivated principal; send a current one as 'Authorization: Bearer <token>' "
                "(the operator issues one with 'parley token issue <agent>')",
                code="invalid_token",
            )
        # A rotation committed during the read may have revoked this token: do not cache it.
        if revocations == self._revocations:
            self._tokens[digest] = principal.id
        self._principals[principal.id] = principal
        await self._touch(digest)
        return principal

    async def _turn_principal(self, bound: TurnBinding) -> Principal:
        principal = await self.get(bound.principal_id)
        if principal is None or not principal.active:
            raise Unauthenticated(
                f"the turn token of {bound.principal_id!r} belongs to a principal that is gone "
                "or deactivated",
                code="invalid_token",
            )
        return principal

    def turn_binding(self, token: str | None) -> TurnBinding | None:
        """The running turn ``token`` was issued for, if it is a live turn token."""
        return self.turn_access.binding(hash_token(token)) if token else None

    async def _touch(self, digest: str) -> None:
        """Record that a token was used, at most once a minute per token on this hub. A failed
        write (a full disk) costs the request nothing: the time is only informative."""
        now = self.ctx.clock.now()
        last = self._touched.get(digest)
        if last is not None and (now - last).total_seconds() < TOUCH_EVERY_S:
            return
        self._touched[digest] = now

        async def job(tx: Tx) -> None:
            await tx.touch_token(digest, now)

        try:
            await self.ctx.store.write(job)
        except Exception as exc:  # informative only: the request goes on
            log.warning("could not record the use of a token: %s", exc)

    async def get(self, principal_id: str, tx: Tx | None = None) -> Principal | None:
        cached = self._principals.get(principal_id)
        if cached is not None:
            return cached
        if tx is not None:
            found: Principal | None = await tx.get("principals", principal_id)
        else:
            async with self.ctx.store.read() as rtx:
                found = await rtx.get("principals", principal_id)
        if found is not None:
            self._principals[found.id] = found
        return found

    async def require(self, principal_id: str, tx: Tx | None = None) -> Principal:
        found = await self.get(principal_id, tx)
        if found is None:
            raise NotFound(f"no agent or human {principal_id!r}", code="principal_not_found")
        return found

    async def list(
        self, kind: PrincipalKind | None = None, *, archived: bool = False
    ) -> list[Principal]:
        """Principals in id order; archived ones only when asked for."""
        async with self.ctx.store.read() as tx:
            p = tx.table("principals").c
            where = [p.kind == kind] if kind else []
            if not archived:
                where.append(p.active.is_(True))
            rows: list[Principal] = await tx.select("principals", *where, order_by=[p.id])
        for row in rows:
            self._principals[row.id] = row
        return rows

    def forget(self, principal_id: str) -> None:
        self._principals.pop(principal_id, None)

    async def follow_changes(self) -> None:
        """Keep this hub's caches true while other hubs share the store: drop a principal
        another hub changed, and its tokens when they were rotated. A subscriber that fell
        behind drops everything."""
        sub = self.ctx.bus.subscribe([PRINCIPALS_TOPIC])
        try:
            while True:
                data = await sub.get()
                if data.get("type") == "overflow":
                    self._revocations += 1
                    self._tokens.clear()
                    self._principals.clear()
                    continue
                principal_id = str(data.get("principal_id"))
                self._principals.pop(principal_id, None)
                if data.get("rotated"):
                    self._revocations += 1
                    self._tokens = {h: p for h, p in self._tokens.items() if p != principal_id}
                    self.turn_access.end_principal(principal_id)
        finally:
            await sub.close()

    def _changed(self, tx: Tx, principal_id: str, *, rotated: bool = False) -> None:
        """Tell the hubs sharing the store (this one too) that a principal changed."""
        data = {"principal_id": principal_id, "rotated": rotated}
        self.ctx.bus.publish_on_commit(tx, PRINCIPALS_TOPIC, data)

    # -- consent ------------------------------------------------------------------------------
    async def set_consent(
        self, caller: Principal, agent_id: str, accepts_channels_from: Sequence[str]
    ) -> Principal:
        """Replace whom an agent lets add it to channels; the operator or the agent itself."""
        _require_self_or_operator(caller, agent_id, "change")
        allowed = consent.check_allow_list(accepts_channels_from)

        async def job(tx: Tx) -> Principal:
            agent: Principal | None = await tx.get("principals", agent_id, for_update=True)
            if agent is None or agent.kind != "agent":
                raise NotFound(f"no agent {agent_id!r}", code="principal_not_found")
            await tx.update("principals", agent_id, accepts_channels_from=allowed)
            self._changed(tx, agent_id)
            self.ctx.events.record(
                tx,
                "agent.consent_changed",
                actor=caller.id,
                subject=agent_id,
                payload={"accepts_channels_from": allowed},
            )
            return agent.model_copy(update={"accepts_channels_from": allowed})

        updated = await self.ctx.store.write(job)
        self._principals[agent_id] = updated
        return updated

    async def consent_of(self, caller: Principal, agent_id: str) -> Sequence[str]:
        """Whom an agent lets add it to channels; readable by the agent itself and the operator."""
        _require_self_or_operator(caller, agent_id, "read")
        async with self.ctx.store.read() as tx:
            agent: Principal | None = await tx.get("principals", agent_id)
        if agent is None or agent.kind != "agent":
            raise NotFound(f"no agent {agent_id!r}", code="principal_not_found")
        return agent.accepts_channels_from

    # -- creation -----------------------------------------------------------------------------
    async def bootstrap_operator(self) -> str | None:
        """Create the operator on first start; returns its token then, None afterwards."""
        if await self.get(OPERATOR_ID) is not None:
            return None
        token = new_token()

        async def job(tx: Tx) -> None:
            if await tx.get("principals", OPERATOR_ID) is not None:
                raise Conflict("operator exists", code="operator_exists")
            operator = Principal(
                id=OPERATOR_ID,
                kind="human",
                role="operator",
                display_name="Operator",
                created=self.ctx.clock.now(),
            )
            tx.insert("principals", operator)
            await tx.insert_token(hash_token(token), OPERATOR_ID, "operator", self.ctx.clock.now())
            self.ctx.events.record(tx, "principal.created", actor="system", subject=OPERATOR_ID)

        try:
            await self.ctx.store.write(job)
        except Conflict:
            return None  # another hub on the same PostgreSQL created it first
        return token

    async def create_agent(self, caller: Principal, spec: AgentSpec) -> Created:
        require_operator(caller, "create agents")
        agent_id = validate_slug(spec.id.strip(), what="agent id")
        runtime = check_runtime(spec.runtime)
        if self._validate_runtime is not None:
            self._validate_runtime(runtime)
        token = new_token()
        now = self.ctx.clock.now()
        channel_id = new_ulid()
        agent = Principal(
            id=agent_id,
            kind="agent",
            display_name=spec.display_name or agent_id,
            workspace=spec.workspace,
            persona=spec.persona,
            runtime=runtime,
            work_channel_id=channel_id,
            accepts_channels_from=consent.check_allow_list(spec.accepts_channels_from),
            created=now,
        )

        async def job(tx: Tx) -> Principal:
            existing: Principal | None = await tx.get("principals", agent_id)
            if existing is not None and not existing.active:
                raise Conflict(
                    f"{agent_id!r} is the id of an archived {existing.kind}; ids are never "
                    "reused, so its mail, transcripts and events keep meaning one principal. "
                    "Choose another id",
                    code="principal_archived",
                )
            if existing is not None:
                raise Conflict(f"agent {agent_id!r} already exists", code="agent_exists")
            if spec.workspace is not None:
                # Checked in the transaction that inserts the agent, against the workspaces
                # stored before it.
                agent.workspace = await self._prepare_workspace(tx, spec.workspace)
            tx.insert("principals", agent)
            # Every agent gets a work channel; its session there is the agent's main session.
            tx.insert(
                "channels",
                Channel(
                    id=channel_id,
                    name=f"{agent_id}-work",
                    kind="work",
                    private=True,
                    created_by=caller.id,
                    created=now,
                    discussion_rounds=1,
                    turn_timeout_s=self.ctx.settings.turn_timeout_s,
                    owner_agent_id=agent_id,
                ),
            )
            await tx.flush()
            await tx.set_members(channel_id, [agent_id])
            tx.insert(
                "sessions",
                LogicalSession(
                    id=new_id("vs-"),
                    agent_id=agent_id,
                    channel_id=channel_id,
                    display_name=f"{agent.display_name} / main",
                    created=now,
                ),
            )
            await tx.insert_token(hash_token(token), agent_id, "initial", now)
            self.ctx.events.record(
                tx,
                "agent.created",
                actor=caller.id,
                subject=agent_id,
                payload={"runtime": runtime.get("kind"), "work_channel_id": channel_id},
            )
            return agent

        created = await self.ctx.store.write(job)
        self._principals[created.id] = created
        return Created(principal=created, token=token, work_channel_id=channel_id)

    async def _prepare_workspace(
        self, tx: Tx, workspace: str, *, for_agent: str | None = None
    ) -> str:
        """The agent's workspace, absolute and resolved, created if missing; refused when
        relative, a system directory, or overlapping another agent's workspace (an agent being
        changed does not overlap its own)."""
        p = tx.table("principals").c
        agents: list[Principal] = await tx.select("principals", p.kind == "agent")
        taken = {a.id: a.workspace for a in agents if a.workspace and a.id != for_agent}
        return self.ctx.workspace.prepare(workspace, taken)

    # -- lifecycle ----------------------------------------------------------------------------
    async def update_agent(self, caller: Principal, agent_id: str, patch: AgentPatch) -> Principal:
        """Change an agent's name, persona, runtime, workspace or consent (operator only), with
        the checks of its creation. Its next turn uses the new settings."""
        require_operator(caller, "change agents")
        values: dict[str, Any] = {}
        if patch.display_name is not None:
            values["display_name"] = patch.display_name.strip() or agent_id
        if patch.persona is not None:
            values["persona"] = patch.persona
        if patch.runtime is not None:
            runtime = check_runtime(patch.runtime)
            if self._validate_runtime is not None:
                self._validate_runtime(runtime)
            values["runtime"] = runtime
        if patch.accepts_channels_from is not None:
            values["accepts_channels_from"] = consent.check_allow_list(patch.accepts_channels_from)
        if not values and patch.workspace is None:
            raise InvalidRequest(
                "nothing to change: give at least one of display_name, persona, runtime, "
                "workspace or accepts_channels_from",
                code="empty_patch",
            )

        async def job(tx: Tx) -> Principal:
            agent = await self._live_agent(tx, agent_id)
            if patch.workspace is not None:
                values["workspace"] = await self._prepare_workspace(
                    tx, patch.workspace, for_agent=agent_id
                )
            await tx.update("principals", agent_id, **values)
            self._changed(tx, agent_id)
            self.ctx.events.record(
                tx,
                "agent.updated",
                actor=caller.id,
                subject=agent_id,
                # Which settings changed, never their values: a runtime holds secrets.
                payload={"changed": sorted(values)},
            )
            return agent.model_copy(update=values)

        updated = await self.ctx.store.write(job)
        self._principals[agent_id] = updated
        return updated

    async def set_disabled(self, caller: Principal, agent_id: str, disabled: bool) -> Principal:
        """Disable an agent (no turns; its mail waits in its inbox) or enable it again."""
        require_operator(caller, "disable or enable agents")

        async def job(tx: Tx) -> Principal:
            agent = await self._live_agent(tx, agent_id)
            if agent.disabled == disabled:
                return agent
            await tx.update("principals", agent_id, disabled=disabled)
            self._changed(tx, agent_id)
            self.ctx.events.record(
                tx,
                "agent.disabled" if disabled else "agent.enabled",
                actor=caller.id,
                subject=agent_id,
            )
            return agent.model_copy(update={"disabled": disabled})

        updated = await self.ctx.store.write(job)
        self._principals[agent_id] = updated
        return updated

    async def archive_agent(self, caller: Principal, agent_id: str) -> Principal:
        """Retire an agent for good (operator only): its tokens are revoked, it leaves its room
        and is listed nowhere, it gets no turns and no new mail. Its mail, transcripts and
        events are kept, and its id stays taken so that they keep meaning this agent."""
        require_operator(caller, "archive agents")
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> Principal:
            agent = await self._live_agent(tx, agent_id)
            member: RoomMember | None = await tx.get("room_members", agent_id, for_update=True)
            if member is not None:
                if member.state in MEETING_STATES:
                    raise Conflict(
                        f"{agent_id!r} is in a meeting of room {member.room_id!r}; archive it "
                        "after the meeting ends",
                        code="member_in_meeting",
                    )
                await tx.delete("room_members", agent_id)
                self.ctx.events.record(
                    tx,
                    "room.left",
                    actor=caller.id,
                    subject=f"room:{member.room_id}",
                    payload={"agent_id": agent_id, "reason": "archived"},
                )
            await tx.update("principals", agent_id, active=False)
            revoked = await tx.revoke_tokens(agent_id, now)
            for end in self._rotation_ends:
                await end(tx, agent_id, caller.id)
            self._changed(tx, agent_id, rotated=True)
            tx.after_commit(lambda: self._revoked(agent_id))
            self.ctx.events.record(
                tx,
                "agent.archived",
                actor=caller.id,
                subject=agent_id,
                payload={
                    "tokens_revoked": revoked,
                    "left_room": member.room_id if member else None,
                },
            )
            return agent.model_copy(update={"active": False})

        updated = await self.ctx.store.write(job)
        self._principals[agent_id] = updated
        return updated

    async def _live_agent(self, tx: Tx, agent_id: str) -> Principal:
        """The agent, locked for the change; refused when unknown, a human, or archived."""
        agent: Principal | None = await tx.get("principals", agent_id, for_update=True)
        if agent is None or agent.kind != "agent":
            raise NotFound(f"no agent {agent_id!r}", code="principal_not_found")
        if not agent.active:
            raise Conflict(
                f"agent {agent_id!r} is archived and can no longer change",
                code="principal_archived",
            )
        return agent

    async def create_human(self, caller: Principal, spec: HumanSpec) -> Created:
        require_operator(caller, "create humans")
        human_id = validate_slug(spec.id.strip(), what="human id")
        token = new_token()
        now = self.ctx.clock.now()
        human = Principal(
            id=human_id,
            kind="human",
            role="operator" if spec.operator else "member",
            display_name=spec.display_name or human_id,
            created=now,
        )

        async def job(tx: Tx) -> Principal:
            if await tx.get("principals", human_id) is not None:
                raise Conflict(f"{human_id!r} already exists", code="principal_exists")
            tx.insert("principals", human)
            await tx.insert_token(hash_token(token), human_id, "initial", now)
            self.ctx.events.record(tx, "human.created", actor=caller.id, subject=human_id)
            return human

        created = await self.ctx.store.write(job)
        self._principals[created.id] = created
        return Created(principal=created, token=token)

    async def issue_token(
        self, caller: Principal, principal_id: str, *, rotate: bool, label: str = "issued"
    ) -> str:
        """A new token for a principal (operator only), labelled so that it can be told apart
        from the principal's others; ``rotate`` revokes the old ones."""
        require_operator(caller, "issue tokens")
        label = check_label(label)
        found = await self.require(principal_id)
        if not found.active:
            raise Conflict(
                f"{principal_id!r} is archived; an archived principal gets no tokens",
                code="principal_archived",
            )
        token = new_token()
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> None:
            if rotate:
                await tx.revoke_tokens(principal_id, now)
                # Held in the store (chat links): ended in the same commit, on every hub at once.
                for end in self._rotation_ends:
                    await end(tx, principal_id, caller.id)
            await tx.insert_token(hash_token(token), principal_id, label, now)
            self.ctx.events.record(
                tx,
                "token.issued",
                actor=caller.id,
                subject=principal_id,
                payload={"rotate": rotate, "label": label},
            )
            if rotate:
                self._changed(tx, principal_id, rotated=True)
                tx.after_commit(lambda: self._revoked(principal_id))

        await self.ctx.store.write(job)
        if rotate and principal_id == OPERATOR_ID and self.on_operator_rotated is not None:
            self.on_operator_rotated(token)
        return token

    async def tokens(self, caller: Principal, principal_id: str) -> Sequence[TokenRecord]:
        """The principal's valid tokens: id, label, when issued and last used, never the secret
        (the hub keeps none). The operator sees anyone's; a principal its own."""
        if not (caller.is_operator or caller.id == principal_id):
            raise PermissionDenied(
                f"{caller.id!r} may not list the tokens of {principal_id!r}; only the operator "
                "and the principal itself may",
                code="operator_only",
            )
        await self.require(principal_id)
        async with self.ctx.store.read() as tx:
            return await tx.tokens_of(principal_id)

    async def revoke_token(
        self, caller: Principal, principal_id: str, token_id: str
    ) -> TokenRecord:
        """Revoke one token of a principal by its id (operator only); its others stay valid."""
        require_operator(caller, "revoke tokens")
        await self.require(principal_id)
        wanted = token_id.strip().lower()
        now = self.ctx.clock.now()

        async def job(tx: Tx) -> TokenRecord:
            found = [t for t in await tx.tokens_of(principal_id) if t.id == wanted]
            if not found:
                raise NotFound(
                    f"{principal_id!r} has no valid token with id {token_id!r}; list them "
                    f"with 'parley token list {principal_id}'",
                    code="token_not_found",
                )
            record = found[0]
            await tx.revoke_token(principal_id, record.hash, now)
            self.ctx.events.record(
                tx,
                "token.revoked",
                actor=caller.id,
                subject=principal_id,
                payload={"token_id": record.id, "label": record.label},
            )
            self._changed(tx, principal_id, rotated=True)
            tx.after_commit(lambda: self._revoked(principal_id))
            return record

        return await self.ctx.store.write(job)

    async def _revoked(self, principal_id: str) -> None:
        """Forget the principal's cached tokens, then tell every open request, stream and long
        poll of the principal: each was made with a token issued before the rotation."""
        # Forget first: a request that re-authenticates on the notice must reach the store.
        self._revocations += 1
        self._tokens = {h: p for h, p in self._tokens.items() if p != principal_id}
        self.turn_access.end_principal(principal_id)
        await self.ctx.bus.publish(
            revocation_topic(principal_id), {"type": TOKENS_REVOKED, "principal_id": principal_id}
        )
