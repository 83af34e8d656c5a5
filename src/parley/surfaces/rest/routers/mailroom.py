"""The mailroom directory format (M9): export all mail as files, import such files."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from parley.core.mailroom import ImportResult
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["mailroom"], responses=ERROR_RESPONSES)


class MailroomFiles(BaseModel):
    """Mailroom files by relative path, e.g.
    ``inbox/bob/2026-05-31T1500-task-ceo-to-bob.md`` or ``archive/W18/…``."""

    files: dict[str, str] = Field(default_factory=dict)


@router.get("/v1/mailroom/export", response_model=MailroomFiles)
async def export(caller: Caller, hub: HubDep) -> Response:
    """Every message as a mailroom file (operator only): open mail under ``inbox/<agent-id>/``,
    closed mail under ``archive/<label>/``."""
    files = await hub.mailroom.export(caller)
    # Encoding every file as JSON is work in proportion to the mail: not on the event loop.
    body = await asyncio.to_thread(json.dumps, {"files": files}, ensure_ascii=False)
    return Response(body, media_type="application/json")


@router.post("/v1/mailroom/import", response_model=ImportResult)
async def import_files(body: MailroomFiles, caller: Caller, hub: HubDep) -> ImportResult:
    """Insert the messages of mailroom files (operator only), keeping their ids, statuses and
    times; messages whose id already exists are skipped. All or nothing."""
    return await hub.mailroom.import_files(caller, body.files)
