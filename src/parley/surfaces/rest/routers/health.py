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
    storage: str = "ok"
    bus: str = "local"
    lease_sweep: str = "off"


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok", version=__version__)


@router.get("/readyz", response_model=Ready, responses={503: {"model": Ready}})
async def readyz(hub: HubDep) -> Ready | JSONResponse:
    """The hub is started, its store answers and has room to write (``storage``: ``full``
    while writes are refused for lack of disk space), its bus listens (several hubs on
    PostgreSQL) and its lease sweep runs."""
    try:
        async with hub.store.read() as tx:
            await tx.get("principals", "operator")
    except Exception:
        return JSONResponse({"status": "unavailable", "store": hub.store.dialect}, status_code=503)
    # A hub whose bus does not listen serves requests but misses other hubs' events: its
    # streams and long polls would hang, so it is not ready.
    bus = hub.bus.state
    sweep = hub.sweep_health()
    storage = await hub.store.storage_state()
    status = "ready" if hub.started else "starting"
    body = Ready(
        status=status, store=hub.store.dialect, storage=storage, bus=bus, lease_sweep=sweep
    )
    if bus == "reconnecting" or sweep == "late" or storage == "full":
        return JSONResponse(body.model_copy(update={"status": "degraded"}).model_dump(), 503)
    return body
