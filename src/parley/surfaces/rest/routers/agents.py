"""Agents, humans and tokens."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field, StrictBool

from parley.core.errors import NotFound
from parley.core.identity import TOKEN_ID_CHARS, Principal, TokenRecord, hash_token
from parley.core.redact import redact_config
from parley.service.identity import MAX_LABEL_CHARS, AgentPatch, AgentSpec, HumanSpec
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["agents"], responses=ERROR_RESPONSES)


class PrincipalView(BaseModel):
    """An agent or human as the caller may see it. The operator and the principal itself see
    its settings with every secret redacted; anyone else sees who it is and its runtime kind,
    never another agent's workspace, persona or runtime settings (Q8)."""

    id: str
    kind: str
    role: str
    display_name: str
    workspace: str | None = Field(
        description="Shown only to the operator and to the principal itself; null otherwise."
    )
    persona: str | None = Field(
        description="Shown only to the operator and to the principal itself; null otherwise."
    )
    runtime: dict[str, Any] = Field(
        description="The runtime config with secrets redacted ('***') for the operator and the "
        "principal itself; only {'kind': ...} for anyone else."
    )
    work_channel_id: str | None
    active: bool = Field(description="False once archived.")
    disabled: bool = Field(description="A disabled agent gets no turns; its mail waits.")
    state: str = Field(description="'active', 'disabled' or 'archived'.")
    created: str

    @classmethod
    def of(cls, p: Principal, viewer: Principal) -> PrincipalView:
        """``p`` as ``viewer`` may see it."""
        trusted = viewer.is_operator or viewer.id == p.id
        return cls(
            id=p.id,
            kind=p.kind,
            role=p.role,
            display_name=p.display_name,
            workspace=p.workspace if trusted else None,
            persona=p.persona if trusted else None,
            runtime=redact_config(p.runtime) if trusted else {"kind": p.runtime_kind},
            work_channel_id=p.work_channel_id,
            active=p.active,
            disabled=p.disabled,
            state=p.state,
            created=p.created.isoformat(),
        )


class CreatedView(BaseModel):
    """The new principal and its bearer token — shown only in this response."""

    principal: PrincipalView
    token: str
    work_channel_id: str | None = None


class TokenRequest(BaseModel):
    # Strict: a rotation revokes every token of the principal, so only a real true asks it.
    rotate: StrictBool = False
    label: str = Field(
        default="issued",
        max_length=MAX_LABEL_CHARS,
        description="What the token is for, e.g. the client that uses it; shown by token lists.",
    )


class TokenInfoView(BaseModel):
    """A valid token as the hub keeps it: never the secret, which only its issue showed."""

    id: str = Field(description="The token's public id, to revoke it by.")
    label: str
    created: str
    last_used: str | None = Field(description="To the minute; null when never used.")

    @classmethod
    def of(cls, t: TokenRecord) -> TokenInfoView:
        return cls(
            id=t.id,
            label=t.label,
            created=t.created.isoformat(),
            last_used=t.last_used.isoformat() if t.last_used else None,
        )


class TokenView(BaseModel):
    principal_id: str
    token: str
    id: str = Field(description="The new token's public id, to revoke it by.")
    label: str


@router.get("/v1/whoami", response_model=PrincipalView)
async def whoami(caller: Caller) -> PrincipalView:
    """Who the bearer token belongs to."""
    return PrincipalView.of(caller, caller)


@router.post("/v1/agents", response_model=CreatedView, status_code=201)
async def create_agent(spec: AgentSpec, caller: Caller, hub: HubDep) -> CreatedView:
    """Create an agent (operator only). It gets a token and a work channel."""
    created = await hub.identity.create_agent(caller, spec)
    return CreatedView(
        principal=PrincipalView.of(created.principal, caller),
        token=created.token,
        work_channel_id=created.work_channel_id,
    )


@router.get("/v1/agents", response_model=list[PrincipalView])
async def list_agents(caller: Caller, hub: HubDep, archived: bool = False) -> list[PrincipalView]:
    """All agents (anyone may look up whom to write to); archived ones only with
    ``?archived=true``."""
    found = await hub.identity.list("agent", archived=archived)
    return [PrincipalView.of(p, caller) for p in found]


@router.get("/v1/agents/{agent_id}", response_model=PrincipalView)
async def get_agent(agent_id: str, caller: Caller, hub: HubDep) -> PrincipalView:
    return PrincipalView.of(await hub.identity.require(agent_id), caller)


@router.patch("/v1/agents/{agent_id}", response_model=PrincipalView)
async def update_agent(
    agent_id: str, patch: AgentPatch, caller: Caller, hub: HubDep
) -> PrincipalView:
    """Change an agent's display name, persona, runtime, workspace or consent (operator only),
    checked as at its creation. Fields left out stay as they are."""
    return PrincipalView.of(await hub.identity.update_agent(caller, agent_id, patch), caller)


@router.post("/v1/agents/{agent_id}/disable", response_model=PrincipalView)
async def disable_agent(agent_id: str, caller: Caller, hub: HubDep) -> PrincipalView:
    """Give the agent no turns until it is enabled (operator only); its mail waits for it."""
    return PrincipalView.of(await hub.identity.set_disabled(caller, agent_id, True), caller)


@router.post("/v1/agents/{agent_id}/enable", response_model=PrincipalView)
async def enable_agent(agent_id: str, caller: Caller, hub: HubDep) -> PrincipalView:
    """Give a disabled agent turns again (operator only)."""
    return PrincipalView.of(await hub.identity.set_disabled(caller, agent_id, False), caller)


@router.post("/v1/agents/{agent_id}/archive", response_model=PrincipalView)
async def archive_agent(agent_id: str, caller: Caller, hub: HubDep) -> PrincipalView:
    """Retire an agent for good (operator only): its tokens are revoked, it leaves its room and
    is listed nowhere; its mail, transcripts and events are kept and its id stays taken."""
    return PrincipalView.of(await hub.identity.archive_agent(caller, agent_id), caller)


@router.post("/v1/humans", response_model=CreatedView, status_code=201)
async def create_human(spec: HumanSpec, caller: Caller, hub: HubDep) -> CreatedView:
    """Create a human (operator only)."""
    created = await hub.identity.create_human(caller, spec)
    return CreatedView(principal=PrincipalView.of(created.principal, caller), token=created.token)


@router.get("/v1/humans", response_model=list[PrincipalView])
async def list_humans(caller: Caller, hub: HubDep) -> list[PrincipalView]:
    return [PrincipalView.of(p, caller) for p in await hub.identity.list("human")]


@router.get("/v1/humans/{human_id}", response_model=PrincipalView)
async def get_human(human_id: str, caller: Caller, hub: HubDep) -> PrincipalView:
    found = await hub.identity.require(human_id)
    if found.kind != "human":
        raise NotFound(f"no human {human_id!r}", code="principal_not_found")
    return PrincipalView.of(found, caller)


@router.post("/v1/principals/{principal_id}/tokens", response_model=TokenView, status_code=201)
async def issue_token(
    principal_id: str, body: TokenRequest, caller: Caller, hub: HubDep
) -> TokenView:
    """Issue a new labelled token (operator only); ``rotate`` revokes the previous ones."""
    token = await hub.identity.issue_token(
        caller, principal_id, rotate=body.rotate, label=body.label
    )
    return TokenView(
        principal_id=principal_id,
        token=token,
        id=hash_token(token)[:TOKEN_ID_CHARS],
        label=body.label.strip(),
    )


@router.get("/v1/principals/{principal_id}/tokens", response_model=list[TokenInfoView])
async def list_tokens(principal_id: str, caller: Caller, hub: HubDep) -> list[TokenInfoView]:
    """The principal's valid tokens (the operator's view, or the principal's own): label, when
    issued and last used, never the secret."""
    return [TokenInfoView.of(t) for t in await hub.identity.tokens(caller, principal_id)]


@router.delete("/v1/principals/{principal_id}/tokens/{token_id}", response_model=TokenInfoView)
async def revoke_token(
    principal_id: str, token_id: str, caller: Caller, hub: HubDep
) -> TokenInfoView:
    """Revoke one token (operator only); the principal's other tokens stay valid."""
    return TokenInfoView.of(await hub.identity.revoke_token(caller, principal_id, token_id))
