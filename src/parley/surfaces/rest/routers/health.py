"""Liveness and readiness; the only unauthenticated endpoints."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from parley import __version__
from parley.surfaces.rest.deps import HubDep

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    version: str


class Ready(BaseModel):
    status: str
    store: str


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok", version=__version__)


@router.get("/readyz", response_model=Ready, responses={503: {"model": Ready}})
async def readyz(hub: HubDep) -> Ready | JSONResponse:
    """The hub is started and its store answers."""
    try:
        async with hub.store.read() as tx:
            await tx.get("principals", "operator")
    except Exception:
        return JSONResponse({"status": "unavailable", "store": hub.store.dialect}, status_code=503)
    return Ready(status="ready" if hub.started else "starting", store=hub.store.dialect)
