"""Identity and mail tools (M1–M8). Each description is the manual an agent reads before it
calls the tool, so it states the rules the hub will enforce (source 002 §5.7)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError

from parley.core.errors import InvalidRequest
from parley.core.limits import MAX_SEQ
from parley.core.mail import MAIL_KINDS, InboxFilter, Message, SendRequest
from parley.service.mail.mailbox import MAX_WAIT_S
from parley.service.tools.registry import ToolCall, agent_tool, without_empty

SEND_MESSAGE = f"""\
Send mail as yourself (the hub sets the sender from your token). to: an agent id, \
'session:<id>', 'channel:<id>' (its other members; members only) or '*' (all other agents; \
once a minute at most). kind: one of {", ".join(MAIL_KINDS)}; other kinds are refused. A \
blocker is always copied to the operator. Reply with parent_message_id; group an exchange with \
correlation_id. With an idempotency_key, a retry returns the original message (marked \
replayed) instead of sending a duplicate."""

UPDATE_MESSAGE = """\
Move a message in your own inbox forward: read -> in_progress -> close. Mail only moves forward \
and is never deleted; only its recipient (or the operator) may update it. Mark mail read once \
you have taken it in, in_progress while you work on it, and close it when done: closing \
archives it, under label if you give one (e.g. a wave)."""

WAIT_FOR_MAIL = f"""\
Wait for new mail and return it as soon as it arrives (marking it delivered), or an empty list \
after timeout_s seconds (0-{MAX_WAIT_S:g}). Returns at once if undelivered mail is already \
waiting. Use this instead of calling check_inbox in a loop; call it again after handling what \
it returned."""


def message_view(msg: Message) -> dict[str, Any]:
    """A message as an agent reads it: empty fields and bookkeeping left out."""
    return without_empty(msg.model_dump(mode="json"), drop=("seq", "ttl_seconds"))


def messages_result(messages: list[Message], **extra: Any) -> dict[str, Any]:
    return {"messages": [message_view(m) for m in messages], "count": len(messages), **extra}


@agent_tool()
async def whoami(call: ToolCall) -> dict[str, Any]:
    """Who you are on this parley hub (decided by your token, never by arguments) and a
    summary of your inbox: unread, in progress, open blockers. Call it first."""
    caller = call.caller
    summary = await call.hub.mail.summary(caller, caller.id)
    me = caller.model_dump(mode="json", include={"id", "kind", "role", "display_name", "workspace"})
    return without_empty(
        {
            **me,
            "work_channel_id": caller.work_channel_id,
            "runtime": caller.runtime_kind if caller.kind == "agent" else None,
            "mail": summary.model_dump(mode="json", exclude={"agent_id"}),
        }
    )


@agent_tool(SEND_MESSAGE)
async def send_message(
    call: ToolCall,
    to: Annotated[str, Field(description="recipient address")],
    kind: Annotated[str, Field(description="mail kind")],
    subject: Annotated[str, Field(description="one line")],
    body: Annotated[str, Field(description="markdown")],
    payload: Annotated[dict[str, Any] | None, Field(description="JSON for programs")] = None,
    cc: Annotated[list[str] | None, Field(description="agent or human ids to copy")] = None,
    parent_message_id: Annotated[str | None, Field(description="message replied to")] = None,
    correlation_id: Annotated[str | None, Field(description="transaction id")] = None,
    related: Annotated[list[str] | None, Field(description="related message ids")] = None,
    labels: Annotated[list[str] | None, Field(description="tags, e.g. 'wave:3'")] = None,
    idempotency_key: Annotated[str | None, Field(description="makes retries safe")] = None,
) -> dict[str, Any]:
    try:
        req = SendRequest(
            to=to,
            kind=kind,
            subject=subject,
            body=body,
            payload=payload or {},
            cc=cc or [],
            parent_message_id=parent_message_id,
            correlation_id=correlation_id,
            related=related or [],
            labels=labels or [],
            idempotency_key=idempotency_key,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidRequest(
            f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}",
            code="validation_error",
        ) from exc
    sent = await call.hub.mail.send(call.caller, req)
    view = message_view(sent.message)
    # A resend with a known idempotency key returns the original; say so, as REST's header does.
    return {**view, "replayed": True} if sent.replayed else view


@agent_tool()
async def check_inbox(
    call: ToolCall,
    unread: Annotated[bool, Field(description="only mail you have not read yet")] = False,
    kind: Annotated[str | None, Field(description="only this kind")] = None,
    since: Annotated[str | None, Field(description="ISO-8601 time; newer mail only")] = None,
    after_seq: Annotated[
        int | None, Field(ge=0, le=MAX_SEQ, description="next_after_seq of the previous page")
    ] = None,
    limit: Annotated[int, Field(ge=1, le=1000, description="at most this many")] = 50,
) -> dict[str, Any]:
    """List your own inbox, oldest first: open mail (not closed). You cannot read anyone
    else's inbox. Listing marks new mail delivered; it stays unread until you
    update_message it to read. A page holds at most limit messages, fewer when they are
    large: when the result says more, call again with after_seq set to its next_after_seq."""
    caller = call.caller
    flt = InboxFilter(unread=unread, kind=kind, since=since, after_seq=after_seq, limit=limit)
    page = await call.hub.mail.inbox_page(caller, caller.id, flt)
    if page.more and page.rows:
        return messages_result(page.rows, more=True, next_after_seq=page.rows[-1].seq)
    return messages_result(page.rows)


@agent_tool()
async def read_message(
    call: ToolCall, id: Annotated[str, Field(description="message id")]
) -> dict[str, Any]:
    """Read one message by id: one in your inbox or one you sent; other agents' mail is
    refused. Reading does not change its status (use update_message)."""
    return message_view(await call.hub.mail.get(call.caller, id))


@agent_tool(UPDATE_MESSAGE)
async def update_message(
    call: ToolCall,
    id: Annotated[str, Field(description="message id")],
    status: Annotated[str, Field(description="read, in_progress or close")],
    label: Annotated[str | None, Field(description="archive label, on close")] = None,
) -> dict[str, Any]:
    target = "closed" if status == "close" else status
    return message_view(await call.hub.mail.update_status(call.caller, id, target, label=label))


@agent_tool()
async def thread(
    call: ToolCall, id: Annotated[str, Field(description="any message id in it")]
) -> dict[str, Any]:
    """The conversation around a message, oldest first: what it replies to and the replies
    to it, its correlation_id and related messages; only mail you sent or received."""
    return messages_result(await call.hub.mail.thread(call.caller, id))


@agent_tool(WAIT_FOR_MAIL)
async def wait_for_mail(
    call: ToolCall,
    timeout_s: Annotated[float, Field(description="seconds to wait at most")] = 30.0,
) -> dict[str, Any]:
    messages = await call.hub.mail.wait(call.caller, timeout_s)
    return messages_result(messages, timed_out=not messages)


TOOLS = (whoami, send_message, check_inbox, read_message, update_message, thread, wait_for_mail)
