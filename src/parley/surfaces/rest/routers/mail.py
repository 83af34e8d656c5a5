"""Mail: send, inbox, read, lifecycle, archive, redeliver, threads, summaries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from parley.core.limits import MAX_SEQ, OptionalStorableText
from parley.core.mail import InboxFilter, MailSummary, Message, SendRequest
from parley.surfaces.rest.deps import Caller, HubDep
from parley.surfaces.rest.errors import ERROR_RESPONSES, ErrorBody
from parley.surfaces.rest.paging import NEXT_DESCRIPTION, link_next

router = APIRouter(tags=["mail"], responses=ERROR_RESPONSES)


class StatusUpdate(BaseModel):
    status: str = Field(max_length=32, description="read, in_progress or closed")
    label: OptionalStorableText = Field(
        default=None, max_length=200, description="archive label on close"
    )


class ArchiveRequest(BaseModel):
    label: OptionalStorableText = Field(default=None, max_length=200)


REPLAYED_HEADER = "Idempotent-Replayed"


@router.post(
    "/v1/mail",
    response_model=Message,
    status_code=201,
    responses={
        201: {"description": "The message was sent (the primary copy)."},
        200: {
            "model": Message,
            "description": "A resend with an idempotency key already used by this sender: "
            "nothing was sent again; this is the original message.",
            "headers": {
                REPLAYED_HEADER: {
                    "description": "'true': the answer replays the original of an idempotent "
                    "resend.",
                    "schema": {"type": "string", "enum": ["true"]},
                }
            },
        },
        429: {"model": ErrorBody, "description": "Sender quota or broadcast rate limit"},
    },
)
async def send(req: SendRequest, response: Response, caller: Caller, hub: HubDep) -> Message:
    """Send mail as the caller (201). With ``idempotency_key`` a resend sends nothing and
    returns the original with 200 and ``Idempotent-Replayed: true`` (M6)."""
    sent = await hub.mail.send(caller, req)
    if sent.replayed:
        response.status_code = 200
        response.headers[REPLAYED_HEADER] = "true"
    return sent.message


@router.get(
    "/v1/agents/{owner}/inbox",
    response_model=list[Message],
    responses={200: {"description": NEXT_DESCRIPTION}},
)
async def inbox(
    owner: str,
    request: Request,
    response: Response,
    caller: Caller,
    hub: HubDep,
    status: Annotated[list[str] | None, Query()] = None,
    kind: str | None = None,
    from_id: Annotated[str | None, Query(alias="from")] = None,
    label: str | None = None,
    unread: bool = False,
    include_archived: bool = False,
    since: str | None = None,
    after_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Message]:
    """An inbox in delivery order (only its owner or the operator may read it), one page at a
    time: a page that does not end the inbox carries a ``Link`` to the next (``after_seq``)."""
    flt = InboxFilter(
        status=status,
        kind=kind,
        from_id=from_id,
        label=label,
        unread=unread,
        include_archived=include_archived,
        since=since,
        after_seq=after_seq,
        limit=limit,
    )
    page = await hub.mail.inbox_page(caller, owner, flt)
    if page.rows:
        link_next(request, response, page.more, after_seq=page.rows[-1].seq)
    return page.rows


@router.get("/v1/agents/{owner}/inbox/wait", response_model=list[Message])
async def wait(owner: str, caller: Caller, hub: HubDep, timeout_s: float = 30.0) -> list[Message]:
    """Long poll: mail not yet delivered to the inbox, as soon as some arrives (marking it
    delivered), or an empty list after ``timeout_s`` seconds (at most 300)."""
    return await hub.mail.wait(caller, timeout_s, owner=owner)


@router.get("/v1/agents/{owner}/summary", response_model=MailSummary)
async def summary(owner: str, caller: Caller, hub: HubDep) -> MailSummary:
    """Unread, in progress, age of the oldest pending message, open blockers."""
    return await hub.mail.summary(caller, owner)


@router.get("/v1/mail/{message_id}", response_model=Message)
async def get_message(message_id: str, caller: Caller, hub: HubDep) -> Message:
    return await hub.mail.get(caller, message_id)


@router.get("/v1/mail/{message_id}/thread", response_model=list[Message])
async def thread(message_id: str, caller: Caller, hub: HubDep) -> list[Message]:
    """Replies, the same correlation id and related messages, as far as the caller may see."""
    return await hub.mail.thread(caller, message_id)


@router.post("/v1/mail/{message_id}/status", response_model=Message)
async def update_status(
    message_id: str, body: StatusUpdate, caller: Caller, hub: HubDep
) -> Message:
    """Move one's own message forward (read → in_progress → closed); the operator may move
    anyone's."""
    return await hub.mail.update_status(caller, message_id, body.status, label=body.label)


@router.post("/v1/mail/{message_id}/archive", response_model=Message)
async def archive(message_id: str, body: ArchiveRequest, caller: Caller, hub: HubDep) -> Message:
    """Close and archive one's own message under a label; the operator may archive anyone's."""
    return await hub.mail.archive(caller, message_id, body.label)


@router.post("/v1/mail/{message_id}/redeliver", response_model=Message, status_code=201)
async def redeliver(message_id: str, caller: Caller, hub: HubDep) -> Message:
    """Operator: put a pending copy of an archived message back in its inbox."""
    return await hub.mail.redeliver(caller, message_id)
