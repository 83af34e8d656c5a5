"""Agents, humans and tokens."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from parley.core.identity import Principal
from parley.service.identity import AgentSpec, HumanSpec
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["agents"], responses=ERROR_RESPONSES)

_SECRET_WORDS = ("key", "token", "secret", "password")


def is_secret(name: str) -> bool:
    """A runtime setting that holds a credential: ``api_key``, ``token``, ``client_secret``…
    but not ``max_tokens`` or ``api_key_env`` (the name of a variable, not its value)."""
    words = name.lower().replace("-", "_").split("_")
    return words[-1] in _SECRET_WORDS


class PrincipalView(BaseModel):
    """An agent or human as others see it; runtime secrets are redacted."""

    id: str
    kind: str
    role: str
    display_name: str
    workspace: str | None
    persona: str
    runtime: dict[str, Any]
    work_channel_id: str | None
    active: bool
    created: str

    @classmethod
    def of(cls, p: Principal) -> PrincipalView:
        runtime = {k: ("***" if is_secret(k) and v else v) for k, v in p.runtime.items()}
        return cls(
            id=p.id,
            kind=p.kind,
            role=p.role,
            display_name=p.display_name,
            workspace=p.workspace,
            persona=p.persona,
            runtime=runtime,
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
    rotate: bool = False


class TokenView(BaseModel):
    principal_id: str
    token: str


@router.get("/v1/whoami", response_model=PrincipalView)
async def whoami(caller: Caller) -> PrincipalView:
    """Who the bearer token belongs to."""
    return PrincipalView.of(caller)


@router.post("/v1/agents", response_model=CreatedView, status_code=201)
async def create_agent(spec: AgentSpec, caller: Caller, hub: HubDep) -> CreatedView:
    """Create an agent (operator only). It gets a token and a work channel."""
    created = await hub.identity.create_agent(caller, spec)
    return CreatedView(
        principal=PrincipalView.of(created.principal),
        token=created.token,
        work_channel_id=created.work_channel_id,
    )


@router.get("/v1/agents", response_model=list[PrincipalView])
async def list_agents(caller: Caller, hub: HubDep) -> list[PrincipalView]:
    """All agents (anyone may look up whom to write to)."""
    return [PrincipalView.of(p) for p in await hub.identity.list("agent")]


@router.get("/v1/agents/{agent_id}", response_model=PrincipalView)
async def get_agent(agent_id: str, caller: Caller, hub: HubDep) -> PrincipalView:
    return PrincipalView.of(await hub.identity.require(agent_id))


@router.post("/v1/humans", response_model=CreatedView, status_code=201)
async def create_human(spec: HumanSpec, caller: Caller, hub: HubDep) -> CreatedView:
    """Create a human (operator only)."""
    created = await hub.identity.create_human(caller, spec)
    return CreatedView(principal=PrincipalView.of(created.principal), token=created.token)


@router.get("/v1/humans", response_model=list[PrincipalView])
async def list_humans(caller: Caller, hub: HubDep) -> list[PrincipalView]:
    return [PrincipalView.of(p) for p in await hub.identity.list("human")]


@router.post("/v1/principals/{principal_id}/tokens", response_model=TokenView, status_code=201)
async def issue_token(
    principal_id: str, body: TokenRequest, caller: Caller, hub: HubDep
) -> TokenView:
    """Issue a new token (operator only); ``rotate`` revokes the previous ones."""
    token = await hub.identity.issue_token(caller, principal_id, rotate=body.rotate)
    return TokenView(principal_id=principal_id, token=token)
