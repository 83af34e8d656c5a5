"""``/metrics``: the hub's Prometheus metrics (P5), for the operator's scraper.

The text holds counts only, but like every route it needs a token, and only the operator's: a
Prometheus job scrapes with ``authorization: {credentials_file: <data root>/operator.token}``.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from parley.service.identity import require_operator
from parley.service.metrics import CONTENT_TYPE
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["health"], responses=ERROR_RESPONSES)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."}},
)
async def metrics(caller: Caller, hub: HubDep) -> Response:
    """Turns, turn latency, failures by reason, mail sent and delivered, open event streams and
    store write batches, in the Prometheus text format (operator only)."""
    require_operator(caller, "read the hub's metrics")
    return Response(hub.ctx.metrics.exposition(), media_type=CONTENT_TYPE)
