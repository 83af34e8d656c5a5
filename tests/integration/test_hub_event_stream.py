"""The operator's hub-wide event stream (``GET /v1/events/stream``) delivers events as they
happen, and a watcher that reconnects with Last-Event-ID gets what it missed, once."""

from __future__ import annotations

from typing import Any

import httpx

from parley.core.identity import Principal
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import send
from tests.integration.test_mail_stream import serving
from tests.integration.test_security_paging import sse_events

ENOUGH = 1000


async def next_event_about(lines: Any, subject: str) -> tuple[str, dict[str, Any]]:
    """The first event of the stream about ``subject``, with its SSE id."""
    async for event_id, event in sse_events(lines, "event", ENOUGH):
        if event["subject"] == subject:
            return event_id, event
    raise AssertionError(f"no event about {subject!r}")


async def test_the_hub_stream_delivers_live_events_and_resumes(
    hub: Hub, make_agent: MakeAgent, operator: Principal
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    assert hub.operator_token is not None
    auth = {"Authorization": f"Bearer {hub.operator_token}"}
    async with serving(hub) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with client.stream("GET", "/v1/events/stream", headers=auth) as r:
            assert r.status_code == 200
            # The stream subscribed before it answered: mail sent now reaches it live.
            first = await send(hub, alice.principal, "bob", "task", subject="live")
            first_id, event = await next_event_about(r.aiter_lines(), f"message:{first.id}")
        assert (event["type"], event["actor"], event["id"]) == ("mail.sent", "alice", first_id)
        assert event["payload"]["recipients"] == ["bob"]

        # Missed while disconnected: the reconnect with Last-Event-ID brings it, not the first.
        missed = await send(hub, alice.principal, "bob", "report", subject="missed")
        headers = {**auth, "Last-Event-ID": first_id}
        async with client.stream("GET", "/v1/events/stream", headers=headers) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            resumed: list[dict[str, Any]] = []
            async for _, event in sse_events(lines, "event", ENOUGH):
                resumed.append(event)
                if event["subject"] == f"message:{missed.id}":
                    break
            assert f"message:{first.id}" not in [e["subject"] for e in resumed]
            assert (resumed[-1]["type"], resumed[-1]["actor"]) == ("mail.sent", "alice")
            # And the resumed stream goes on live.
            after = await send(hub, operator, "bob", "notice", subject="after")
            _, event = await next_event_about(lines, f"message:{after.id}")
        assert (event["type"], event["actor"]) == ("mail.sent", "operator")
