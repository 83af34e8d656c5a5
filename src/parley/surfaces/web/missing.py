"""An unknown page of the UI: an HTML page that says so, not the API's JSON 404. Mounted last,
after every other route of the UI."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from parley.surfaces.web.auth import ViewerDep
from parley.surfaces.web.render import page

router = APIRouter()


@router.get("/{rest:path}", response_class=HTMLResponse)
async def unknown_page(request: Request, viewer: ViewerDep, rest: str) -> HTMLResponse:
    return page(request, viewer, "missing.html", 404, path=request.url.path)
