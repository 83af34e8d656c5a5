"""Search over mail and channel messages: every word matched as a prefix by the store's own
full-text index (FTS5 on SQLite, ``tsvector`` on PostgreSQL), with the filters, and never a hit
the caller could not read."""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import Any

import pytest
from alembic import command
from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import create_async_engine

from parley.adapters.store import migrate
from parley.adapters.store.postgres import async_url
from parley.core.errors import InvalidRequest
from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.core.search import SearchQuery
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.testing import FakeClock
from tests.conftest import MakeAgent


def found(hits: list[Any]) -> set[tuple[str, str, str]]:
    return {(h.source, h.sender_id, h.snippet) for h in hits}


@pytest.fixture
async def world(
    hub: Hub, operator: Principal, make_agent: MakeAgent, clock: FakeClock
) -> dict[str, Any]:
    alice = (await make_agent("alice")).principal
    bob = (await make_agent("bob", accepts_channels_from=["alice"])).principal
    carol = (await make_agent("carol")).principal
    await hub.mail.send(
        alice,
        SendRequest(
            to="bob", kind="task", subject="Review the parser", body="The tokenizer breaks."
        ),
    )
    clock.advance(60)
    await hub.mail.send(
        bob, SendRequest(to="carol", kind="report", subject="Done", body="Parser fixed today.")
    )
    group = await hub.channels.create(alice, ChannelSpec(name="design", members=["bob"]))
    await hub.channels.post(alice, group.id, "The parser should keep quotes.")
    private = await hub.channels.create(
        operator, ChannelSpec(name="ops", kind="direct", members=["carol"])
    )
    clock.advance(60)
    await hub.channels.post(operator, private.id, "Parsers are next quarter's plan.")
    await hub.tasks.wait_idle()
    return {"alice": alice, "bob": bob, "carol": carol, "group": group, "private": private}


async def test_each_finds_only_what_it_may_read(
    hub: Hub, operator: Principal, world: dict[str, Any]
) -> None:
    q = SearchQuery(text="parser")
    bob = found(await hub.search.find(world["bob"], q))
    assert bob == {
        ("mail", "alice", "The tokenizer breaks."),
        ("mail", "bob", "Parser fixed today."),  # the original it sent
        ("channel", "alice", "The parser should keep quotes."),
    }
    carol = found(await hub.search.find(world["carol"], q))
    assert carol == {
        ("mail", "bob", "Parser fixed today."),
        ("channel", "operator", "Parsers are next quarter's plan."),
    }
    alice = found(await hub.search.find(world["alice"], q))
    assert alice == {
        ("mail", "alice", "The tokenizer breaks."),
        ("channel", "alice", "The parser should keep quotes."),
    }
    everything = await hub.search.find(operator, q)
    assert len(everything) == 4
    # Newest first.
    assert [h.created for h in everything] == sorted((h.created for h in everything), reverse=True)


async def test_filters_narrow_the_hits(
    hub: Hub, operator: Principal, world: dict[str, Any], clock: FakeClock
) -> None:
    async def texts(**kw: Any) -> set[str]:
        return {h.snippet for h in await hub.search.find(operator, SearchQuery(**kw))}

    assert await texts(text="pars", source="mail") == {
        "The tokenizer breaks.",
        "Parser fixed today.",
    }
    assert await texts(text="parser", sender="alice") == {
        "The tokenizer breaks.",
        "The parser should keep quotes.",
    }
    assert await texts(text="parser", kind="task") == {"The tokenizer breaks."}
    assert await texts(text="parser", kind="group") == {"The parser should keep quotes."}
    assert await texts(text="parser", channel_id=world["private"].id) == {
        "Parsers are next quarter's plan."
    }
    assert await texts(text="parser quotes") == {"The parser should keep quotes."}
    now = clock.now()
    assert await texts(text="parser", since=now - timedelta(seconds=30)) == {
        "Parsers are next quarter's plan."
    }
    assert "Parsers are next quarter's plan." not in await texts(
        text="parser", until=now - timedelta(seconds=30)
    )
    assert await texts(text="nothing-like-this") == set()
    # The subject is searched too.
    assert await texts(text="review") == {"The tokenizer breaks."}


async def test_query_syntax_never_reaches_the_index(
    hub: Hub, operator: Principal, world: dict[str, Any]
) -> None:
    for text in ('parser"', "parser & !quotes", "parser:*", "'parser'", "(-"):
        # Only the words count; what would be syntax to the index is dropped.
        hits = await hub.search.find(operator, SearchQuery(text=text, limit=10))
        assert hits, text
    assert await hub.search.find(operator, SearchQuery(text='" OR * nothing')) == []
    with pytest.raises(InvalidRequest) as caught:
        await hub.search.find(operator, SearchQuery(text="x" * 300))
    assert caught.value.code == "invalid_search"


async def test_rest_search_applies_the_callers_rules(
    hub: Hub, api: Any, world: dict[str, Any], make_agent: MakeAgent
) -> None:
    dave = await make_agent("dave")
    response = await api(dave.token).get("/v1/search", params={"q": "parser"})
    assert response.status_code == 200 and response.json() == []
    assert hub.operator_token is not None
    boss = api(hub.operator_token)
    response = await boss.get("/v1/search", params={"q": "parser", "source": "channel"})
    assert response.status_code == 200
    hits = response.json()
    assert {h["channel_id"] for h in hits} == {world["group"].id, world["private"].id}
    assert all(h["source"] == "channel" for h in hits)
    bad = await boss.get("/v1/search", params={"q": "x" * 300})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_search"


def _redo_0007(connection: Any) -> None:
    config = migrate._config(connection)
    command.downgrade(config, "0006")
    command.upgrade(config, "head")


async def test_the_migration_indexes_the_rows_stored_before_it(
    hub: Hub, operator: Principal, world: dict[str, Any], database_url: str
) -> None:
    if database_url.startswith("sqlite:///"):
        url = "sqlite+aiosqlite:///" + database_url.removeprefix("sqlite:///")
    else:
        url = async_url(database_url)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_redo_0007)
    finally:
        await engine.dispose()
    assert len(await hub.search.find(operator, SearchQuery(text="parser"))) == 4
    # And the index follows what is stored after it.
    await hub.channels.post(world["alice"], world["group"].id, "A parser for dates too.")
    await hub.tasks.wait_idle()
    assert len(await hub.search.find(operator, SearchQuery(text="parser"))) == 5


async def test_a_time_with_an_offset_is_the_same_instant(
    hub: Hub, operator: Principal, world: dict[str, Any], clock: FakeClock
) -> None:
    now = clock.now()
    east = timezone(timedelta(hours=9))
    later = SearchQuery(text="parser", since=(now - timedelta(seconds=30)).astimezone(east))
    assert {h.snippet for h in await hub.search.find(operator, later)} == {
        "Parsers are next quarter's plan."
    }


# -- SQLite: rows stored since the last search are indexed by the next ---------------------------
async def raw(hub: Hub, sql: str, **params: Any) -> None:
    async def job(tx: Any) -> None:
        await tx.execute(sql_text(sql), params)

    await hub.store.write(job)


async def test_sqlite_indexes_at_search_what_was_stored_since_the_last_one(
    sqlite_only: None, hub: Hub, operator: Principal, world: dict[str, Any]
) -> None:
    # A first search indexes every row so far; the newest mail is then deleted, and the next
    # one stored takes its rowid: only an index made anew finds it.
    assert len(await hub.search.find(operator, SearchQuery(text="tokenizer"))) == 1
    newest = (await hub.search.find(operator, SearchQuery(text="fixed", source="mail")))[0]
    await raw(hub, "DELETE FROM messages WHERE id = :id", id=newest.id)
    await hub.mail.send(
        world["alice"], SendRequest(to="bob", kind="info", subject="Later", body="Lexer notes.")
    )
    hits = await hub.search.find(operator, SearchQuery(text="lexer"))
    assert [h.subject for h in hits] == ["Later"]
    assert await hub.search.find(operator, SearchQuery(text="fixed", source="mail")) == []
    # A row's text changed after it was indexed is found by its new words, and once; so is
    # one changed before any search indexed it.
    await raw(hub, "UPDATE messages SET body = 'Grammar notes.' WHERE subject = 'Later'")
    assert [h.subject for h in await hub.search.find(operator, SearchQuery(text="grammar"))] == [
        "Later"
    ]
    assert await hub.search.find(operator, SearchQuery(text="lexer")) == []
    await hub.mail.send(
        world["bob"], SendRequest(to="alice", kind="info", subject="Again", body="Draft one.")
    )
    await raw(hub, "UPDATE messages SET body = 'Draft two.' WHERE subject = 'Again'")
    hits = await hub.search.find(operator, SearchQuery(text="draft"))
    assert [(h.subject, h.snippet) for h in hits] == [("Again", "Draft two.")]


async def test_an_unknown_kind_filter_is_refused_not_answered_with_nothing(
    hub: Hub, operator: Principal, world: dict[str, Any]
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await hub.search.find(operator, SearchQuery(text="parser", kind="bogus"))
    assert refused.value.code == "unknown_kind"
    assert "task" in refused.value.message and "group" in refused.value.message
