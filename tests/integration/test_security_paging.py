"""Lists and stream backfills are paged by size as well as count: a page stops adding rows once it
holds the page budget (always one row at least), a list says where the rest begins in a ``Link``
header, and a stream reads its backfill one page at a time instead of the whole inbox."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from parley.adapters.store.sql import SqlTx
from parley.config import Settings
from parley.core.identity import Principal
from parley.core.ports import Page, Tx
from parley.service.hub import Hub
from parley.service.tools.mail import check_inbox
from parley.service.tools.registry import ToolCall
from tests.conftest import MakeAgent
from tests.integration.mail_support import send
from tests.integration.test_mail_stream import READ_TIMEOUT_S, serving

Api = Callable[[str | None], httpx.AsyncClient]
BUDGET = 50_000
BIG = "x" * 20_000  # three of these reach the budget
_LINK = re.compile(r'^<([^>]+)>; rel="next"$')


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"page_max_bytes": BUDGET})


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The number of rows of every page the store hands out, by store method."""
    seen: dict[str, list[int]] = {"inbox_page": [], "channel_page": [], "page": []}
    for name in seen:
        original = getattr(SqlTx, name)

        def recording(original: Any = original, name: str = name) -> Any:
            async def wrapper(self: SqlTx, *args: Any, **kwargs: Any) -> Page[Any]:
                page: Page[Any] = await original(self, *args, **kwargs)
                seen[name].append(len(page.rows))
                return page

            return wrapper

        monkeypatch.setattr(SqlTx, name, recording())
    return seen


async def follow(client: httpx.AsyncClient, url: str) -> tuple[list[list[Any]], list[str]]:
    """Every page of a list, following ``Link: rel=next``; returns the pages and the links."""
    got: list[list[Any]] = []
    links: list[str] = []
    next_url: str | None = url
    while next_url is not None:
        r = await client.get(next_url)
        assert r.status_code == 200, r.text
        got.append(r.json())
        link = r.headers.get("link")
        next_url = None
        if link is not None:
            match = _LINK.match(link)
            assert match, link
            next_url = match[1]
            links.append(next_url)
        assert len(got) < 50, "the pages never end"
    return got, links


async def test_an_inbox_page_stops_at_the_byte_budget_and_links_to_the_rest(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    sent = [await send(hub, alice.principal, "bob", body=BIG) for _ in range(10)]
    got, links = await follow(api(bob.token), "/v1/agents/bob/inbox?limit=100")
    assert [len(p) for p in got] == [3, 3, 3, 1]
    assert links[0] == "/v1/agents/bob/inbox?limit=100&after_seq=3"
    assert [m["id"] for p in got for m in p] == [m.id for m in sent]


async def test_the_check_inbox_tool_says_more_follows_and_where(
    hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    sent = [await send(hub, alice.principal, "bob", body=BIG) for _ in range(4)]
    call = ToolCall(hub, bob.principal)
    first = await check_inbox.run(call, {"limit": 100})
    assert (first["count"], first["more"], first["next_after_seq"]) == (3, True, 3)
    rest = await check_inbox.run(call, {"after_seq": first["next_after_seq"]})
    assert "more" not in rest and "next_after_seq" not in rest
    assert [m["id"] for m in first["messages"] + rest["messages"]] == [m.id for m in sent]


async def test_a_page_of_small_mail_ends_at_its_limit_with_a_link(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    for i in range(5):
        await send(hub, alice.principal, "bob", body=f"m{i}", labels=["odd"] if i % 2 else [])
    got, _ = await follow(api(bob.token), "/v1/agents/bob/inbox?limit=2")
    assert [len(p) for p in got] == [2, 2, 1]
    # A label is matched row by row; its pages still end at the limit.
    odd, _ = await follow(api(bob.token), "/v1/agents/bob/inbox?limit=1&label=odd")
    assert [[m["body"] for m in p] for p in odd] == [["m1"], ["m3"]]


async def append(hub: Hub, channel_id: str, content: str) -> None:
    async def job(tx: Tx) -> None:
        await hub.channels.post_as_system(tx, channel_id, content)

    await hub.store.write(job)


async def test_channel_messages_are_paged_by_bytes(
    hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    alice = await make_agent("alice")
    client = api(alice.token)
    channel = (await client.post("/v1/channels", json={"name": "big"})).json()
    for i in range(7):
        await append(hub, channel["id"], f"{i}{BIG}")
    url = f"/v1/channels/{channel['id']}/messages"
    got, _ = await follow(client, url)
    assert [len(p) for p in got] == [3, 3, 1]
    assert [m["content"][0] for p in got for m in p] == list("0123456")
    group, _ = await follow(client, f"/v1/im/sessions/{channel['id']}/messages")
    assert [len(p) for p in group] == [3, 3, 1]
    latest = (await client.get(url, params={"latest": 5})).json()
    assert [m["content"][0] for m in latest] == list("456")


async def sse_events(
    lines: AsyncIterator[str], wanted: str, count: int
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The next ``count`` events named ``wanted`` of an event stream's lines."""
    event: dict[str, str] = {}
    yielded = 0
    async with asyncio.timeout(READ_TIMEOUT_S):
        async for line in lines:
            if line == "":
                if event.get("event") == wanted:
                    yield event["id"], json.loads(event["data"])
                    yielded += 1
                    if yielded == count:
                        return
                event = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(":")
                event[key] = value.removeprefix(" ")
    raise AssertionError("the stream ended")


async def test_the_inbox_stream_backfills_page_by_page(
    hub: Hub, make_agent: MakeAgent, pages: dict[str, list[int]]
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    sent = [await send(hub, alice.principal, "bob", body=BIG) for _ in range(12)]
    async with serving(hub) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        headers = {"Authorization": f"Bearer {bob.token}"}
        async with client.stream("GET", "/v1/agents/bob/inbox/stream", headers=headers) as r:
            lines = r.aiter_lines()
            got = [data async for _, data in sse_events(lines, "mail", 12)]
            assert [m["id"] for m in got] == [m.id for m in sent]
            # Never more than one page in hand: three big messages reach the budget.
            assert pages["inbox_page"][:4] == [3, 3, 3, 3]
            live = await send(hub, alice.principal, "bob", body="live")
            [(seq, data)] = [e async for e in sse_events(lines, "mail", 1)]
            assert (seq, data["id"]) == ("13", live.id)


async def test_the_channel_stream_backfills_page_by_page(
    hub: Hub, make_agent: MakeAgent, api: Api, pages: dict[str, list[int]]
) -> None:
    alice = await make_agent("alice")
    channel = (await api(alice.token).post("/v1/channels", json={"name": "big"})).json()
    for i in range(7):
        await append(hub, channel["id"], f"{i}{BIG}")
    async with serving(hub) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        headers = {"Authorization": f"Bearer {alice.token}"}
        path = f"/v1/channels/{channel['id']}/stream"
        async with client.stream("GET", path, headers=headers) as r:
            got = [data async for _, data in sse_events(r.aiter_lines(), "message", 7)]
    assert [m["content"][0] for m in got] == list("0123456")
    assert pages["channel_page"][:3] == [3, 3, 1]


class TestTinyBudget:
    """With a budget of one byte every page holds exactly one row, never none."""

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"page_max_bytes": 1})

    async def test_the_event_log_pages_one_event_at_a_time(
        self, hub: Hub, make_agent: MakeAgent, api: Api, operator: Principal
    ) -> None:
        await make_agent("bob")
        for i in range(3):
            await send(hub, operator, "bob", body=f"m{i}")
        assert hub.operator_token is not None
        got, links = await follow(api(hub.operator_token), "/v1/events?type=mail.sent")
        assert [len(p) for p in got] == [1, 1, 1, 1][: len(got)]
        assert len([p for p in got if p]) == 3
        assert all("after=" in link for link in links)

    async def test_the_hub_stream_resumes_one_event_per_page(
        self, hub: Hub, make_agent: MakeAgent, operator: Principal, pages: dict[str, list[int]]
    ) -> None:
        await make_agent("bob")
        for i in range(3):
            await send(hub, operator, "bob", body=f"m{i}")
        async with hub.store.read() as tx:
            events = await hub.ctx.events.query(tx, limit=1000)
        pages["page"].clear()  # the stream's pages count, not the query's above
        first = events[0].id
        assert hub.operator_token is not None
        async with serving(hub) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            headers = {"Authorization": f"Bearer {hub.operator_token}", "Last-Event-ID": first}
            async with client.stream("GET", "/v1/events/stream", headers=headers) as r:
                got = [
                    ev_id
                    async for ev_id, _ in sse_events(r.aiter_lines(), "event", len(events) - 1)
                ]
        assert got == [ev.id for ev in events[1:]]
        assert set(pages["page"][: len(got)]) == {1}
