"""An inbox filter parley cannot match is refused with its own code, on every surface that
reads an inbox (they share the mailbox's check): an unknown status or kind would otherwise
answer an empty inbox, which reads as "no such mail"."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from parley.core.errors import InvalidRequest
from parley.core.identity import Principal
from parley.core.mail import InboxFilter, SendRequest
from parley.service.hub import Hub
from tests.conftest import MakeAgent


async def test_an_unknown_status_or_kind_filter_is_refused(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    bob = (await make_agent("bob")).principal
    await hub.mail.send(operator, SendRequest(to="bob", kind="task", subject="s", body="b"))
    with pytest.raises(InvalidRequest) as status:
        await hub.mail.inbox(bob, "bob", InboxFilter(status=["pending", "bogus"]))
    assert status.value.code == "invalid_status"
    assert "in_progress" in status.value.message
    with pytest.raises(InvalidRequest) as kind:
        await hub.mail.inbox(bob, "bob", InboxFilter(kind="bogus"))
    assert kind.value.code == "unknown_kind"
    # The known values still filter.
    assert [m.kind for m in await hub.mail.inbox(bob, "bob", InboxFilter(kind="task"))] == ["task"]
    assert await hub.mail.inbox(bob, "bob", InboxFilter(status=["closed"])) == []


async def test_rest_answers_an_unknown_inbox_status_with_its_code(
    hub: Hub, make_agent: MakeAgent, api: Callable[[str | None], httpx.AsyncClient]
) -> None:
    bob = await make_agent("bob")
    client = api(bob.token)
    response = await client.get("/v1/agents/bob/inbox", params={"status": "bogus"})
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_status"
