"""Agents, humans and tokens."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field, StrictBool

from parley.core.identity import Principal
from parley.core.redact import redact_config
from parley.service.identity import AgentSpec, HumanSpec
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
    active: bool
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


class TokenView(BaseModel):
    principal_id: str
    token: str


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
async def list_agents(caller: Caller, hub: HubDep) -> list[PrincipalView]:
    """All agents (anyone may look up whom to write to)."""
    return [PrincipalView.of(p, caller) for p in await hub.identity.list("agent")]


@router.get("/v1/agents/{agent_id}", response_model=PrincipalView)
async def get_agent(agent_id: str, caller: Caller, hub: HubDep) -> PrincipalView:
    return PrincipalView.of(await hub.identity.require(agent_id), caller)


@router.post("/v1/humans", response_model=CreatedView, status_code=201)
async def create_human(spec: HumanSpec, caller: Caller, hub: HubDep) -> CreatedView:
    """Create a human (operator only)."""
    created = await hub.identity.create_human(caller, spec)
    return CreatedView(principal=PrincipalView.of(created.principal, caller), token=created.token)


@router.get("/v1/humans", response_model=list[PrincipalView])
async def list_humans(caller: Caller, hub: HubDep) -> list[PrincipalView]:
    return [PrincipalView.of(p, caller) for p in await hub.identity.list("human")]


@router.post("/v1/principals/{principal_id}/tokens", response_model=TokenView, status_code=201)
async def issue_token(
    principal_id: str, body: TokenRequest, caller: Caller, hub: HubDep
) -> TokenView:
    """Issue a new token (operator only); ``rotate`` revokes the previous ones."""
    token = await hub.identity.issue_token(caller, principal_id, rotate=body.rotate)
    return TokenView(principal_id=principal_id, token=token)
