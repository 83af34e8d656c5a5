"""Create agents, groups and rooms and send mail from the UI: the same request models and service
calls as the API and the CLI behind it, so the same rules hold (who may, what is valid); a
refusal comes back on the page with its code and message. Forms carry the session's CSRF token
like every other UI form."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from parley.core.errors import InvalidRequest
from parley.core.mail import MAIL_KINDS, SendRequest
from parley.core.runtime import RUNTIME_KINDS
from parley.service.conversations.channels import ChannelSpec
from parley.service.identity import AgentSpec, Created
from parley.service.meetings.rooms import RoomSpec
from parley.surfaces.web.auth import PREFIX, ActionDep, ViewerDep, hub_of
from parley.surfaces.web.render import attempt, page

router = APIRouter()

WHERE = f"{PREFIX}/new"


def _names(raw: str) -> list[str]:
    """A comma- or space-separated list of ids, as typed."""
    return [n for n in raw.replace(",", " ").split() if n]


def _runtime(kind: str, raw: str) -> dict[str, Any]:
    """An agent's runtime block from its kind and JSON settings, as ``--runtime`` and
    ``--runtime-json`` make it."""
    runtime: dict[str, Any] = {}
    if raw.strip():
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise InvalidRequest(
                f"runtime settings: not valid JSON ({exc})", code="validation_error"
            ) from None
        if not isinstance(parsed, dict):
            raise InvalidRequest("runtime settings: must be a JSON object", code="validation_error")
        runtime = parsed
    runtime["kind"] = kind or "none"
    return runtime


@router.get("/new", response_class=HTMLResponse)
async def new(request: Request, viewer: ViewerDep) -> HTMLResponse:
    return page(request, viewer, "new.html", runtime_kinds=RUNTIME_KINDS, mail_kinds=MAIL_KINDS)


@router.post("/agents/create")
async def create_agent(request: Request, action: ActionDep) -> RedirectResponse:
    viewer, form = action
    hub = hub_of(request)

    async def run() -> Created:
        spec = AgentSpec(
            id=form.get("id", ""),
            display_name=form.get("display_name") or None,
            persona=form.get("persona", ""),
            runtime=_runtime(form.get("runtime", ""), form.get("runtime_json", "")),
            accepts_channels_from=_names(form.get("accepts_channels_from", "")),
        )
        created = await hub.identity.create_agent(viewer.principal, spec)
        # The token is shown once, here, as the CLI prints it once.
        viewer.session.say("ok", f"Its token (shown only now): {created.token}")
        return created

    return await attempt(viewer, run, "Agent created.", WHERE)


@router.post("/groups/create")
async def create_group(request: Request, action: ActionDep) -> RedirectResponse:
    viewer, form = action
    hub = hub_of(request)

    async def run() -> Any:
        rounds = form.get("discussion_rounds", "").strip()
        spec = ChannelSpec(
            name=form.get("name", ""),
            kind="group",
            members=_names(form.get("members", "")),
            private=form.get("private") == "on",
            **({"discussion_rounds": rounds} if rounds else {}),
        )
        return await hub.channels.create(viewer.principal, spec)

    return await attempt(
        viewer, run, "Group created.", WHERE, then=lambda c: f"{PREFIX}/channels/{c.id}"
    )


@router.post("/rooms/create")
async def create_room(request: Request, action: ActionDep) -> RedirectResponse:
    viewer, form = action
    hub = hub_of(request)

    async def run() -> Any:
        return await hub.rooms.create(viewer.principal, RoomSpec(name=form.get("name", "")))

    return await attempt(viewer, run, "Room created.", WHERE, then=lambda _: f"{PREFIX}/meetings")


@router.post("/mail/send")
async def send_mail(request: Request, action: ActionDep) -> RedirectResponse:
    viewer, form = action
    hub = hub_of(request)

    async def run() -> Any:
        req = SendRequest(
            to=form.get("to", ""),
            kind=form.get("kind", ""),
            subject=form.get("subject", ""),
            body=form.get("body", ""),
            cc=_names(form.get("cc", "")),
        )
        return await hub.mail.send(viewer.principal, req)

    return await attempt(viewer, run, "Mail sent.", WHERE)
