"""The web UI's live streams over plain HTTP against a served hub: bounded per session and per
principal, one render of a panel for every stream of a viewer with bursts coalesced, and ended at
once when the viewer may no longer see what they show (removed from the channel, the channel
deleted) or when their session ends (signed out, evicted, expired)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from parley.config import Settings
from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelPatch, ChannelSpec
from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from parley.surfaces.web.feeds import LiveStreams
from parley.surfaces.web.sessions import WebSessions
from parley.testing import FakeClock
from tests.conftest import MakeAgent
from tests.integration.discussion_support import within
from tests.integration.mail_support import send
from tests.integration.mcp_support import serving, until
from tests.integration.web_live_support import Browser, LiveReader, Pacer

PER_SESSION = 2
PER_PRINCIPAL = 4


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # A refresh interval no test waits out: the panels' wait is the test's Pacer.
    return settings.model_copy(
        update={
            "ui_live_streams_per_session": PER_SESSION,
            "ui_live_streams_per_principal": PER_PRINCIPAL,
            "ui_live_refresh_s": 3600.0,
            "ui_sessions_per_principal": 3,
        }
    )


class Served:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.live: LiveStreams = app.state.web_live
        self.sessions: WebSessions = app.state.web_sessions
        self.pacer = Pacer()
        self.live.pace = self.pacer
        # Turns among a principal's panels are tested on their own (tests/unit): here every
        # wait is a panel's own refresh interval.
        self.live.principal_renders = 10**12

    def browser(self) -> Browser:
        return Browser(self.url)


@pytest.fixture
async def served(hub: Hub) -> AsyncIterator[Served]:
    app = create_app(hub=hub)
    async with serving(app) as url:
        yield Served(url, app)


def unread(overview: str, agent_id: str) -> str:
    """The unread count of ``agent_id`` in an overview panel."""
    found = re.search(
        rf'owner={agent_id}">{agent_id}</a>.*?</span></td>\s*<td data-label="Unread">([^<]*)</td>',
        overview,
        re.S,
    )
    assert found is not None, overview
    return found.group(1)


# -- bounds ----------------------------------------------------------------------------------------
async def test_live_streams_are_bounded_per_session_and_per_principal(
    served: Served, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(served.browser())
        await one.sign_in(alice.token)
        for _ in range(PER_SESSION):
            await stack.enter_async_context(one.live("/ui/overview/live"))
        refused = await one.refused("/ui/overview/live")
        assert refused.status_code == 429
        assert "live_streams_exceeded" in refused.text and "this sign-in session" in refused.text
        assert int(refused.headers["retry-after"]) >= 1
        # Another session of the same principal, up to the principal's bound.
        two = await stack.enter_async_context(served.browser())
        await two.sign_in(alice.token)
        for _ in range(PER_PRINCIPAL - PER_SESSION):
            await stack.enter_async_context(two.live("/ui/mail/live"))
        three = await stack.enter_async_context(served.browser())
        await three.sign_in(alice.token)
        refused = await three.refused("/ui/channels/live")
        assert refused.status_code == 429 and "its sessions together" in refused.text
        # Another principal is not bound by alice's streams.
        other = await stack.enter_async_context(served.browser())
        await other.sign_in(bob.token)
        async with other.live("/ui/overview/live") as stream:
            assert (await stream.next()) is not None
        assert served.live.open_count("alice") == PER_PRINCIPAL
    # Closed streams are counted out: alice opens them again.
    await until(lambda: served.live.open_count("alice") == 0, "alice's streams counted out")
    async with served.browser() as again:
        await again.sign_in(alice.token)
        async with again.live("/ui/overview/live") as stream:
            assert (await stream.next()) is not None


# -- one render for every stream, bursts coalesced -------------------------------------------------
async def test_a_panel_is_rendered_once_for_every_stream_of_a_viewer_and_bursts_coalesce(
    served: Served, hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with AsyncExitStack() as stack:
        streams: list[LiveReader] = []
        for _ in range(PER_PRINCIPAL // PER_SESSION):
            browser = await stack.enter_async_context(served.browser())
            await browser.sign_in(alice.token)
            for _ in range(PER_SESSION):
                stream = await stack.enter_async_context(browser.live("/ui/overview/live"))
                first = await stream.until("overview")
                assert unread(first.data, "alice") == "0"
                streams.append(stream)
        renders = served.live.renders
        served.pacer.hold()
        sentinel = hub.bus.subscribe(["hub"])
        try:
            await send(hub, bob.principal, "alice", body="first")
            # The first change of a burst waits out the rest of the refresh interval...
            await within(served.pacer.waiting.wait(), "the panel to wait for its next render")
            # ... while the burst goes on.
            for i in range(19):
                await send(hub, bob.principal, "alice", body=f"more {i}")
            # Everything published so far has reached the panel's subscription once this has.
            await hub.bus.publish("hub", {"type": "test-sentinel"})
            while (await within(sentinel.get(), "the sentinel")).get("type") != "test-sentinel":
                pass
        finally:
            await sentinel.close()
        served.pacer.release()
        shown = [await stream.until("overview") for stream in streams]
    # One render for the whole burst and every stream, its last state shown, the same bytes
    # sent to each stream.
    assert served.live.renders == renders + 1
    assert [unread(event.data, "alice") for event in shown] == ["20"] * len(streams)
    assert len({event.data for event in shown}) == 1


# -- item 6: rights that are lost end the streams --------------------------------------------------
async def test_a_member_removed_from_a_channel_stops_receiving_its_live_page(
    served: Served, hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    channel = await hub.channels.create(
        operator, ChannelSpec(name="g", members=["bob", "carol"], private=True)
    )
    await hub.channels.post(operator, channel.id, "before")
    path = f"/ui/channels/{channel.id}/live"
    async with (
        served.browser() as bobs,
        served.browser() as carols,
    ):
        await bobs.sign_in(bob.token)
        await carols.sign_in(carol.token)
        async with bobs.live(path) as bob_stream, carols.live(path) as carol_stream:
            for stream in (bob_stream, carol_stream):
                await stream.until_all(("message", "before"), ("tasks", ""))
            await hub.channels.update(operator, channel.id, ChannelPatch(members=["carol"]))
            await hub.channels.post(operator, channel.id, "after the removal")
            rest = await bob_stream.to_end()
            assert "after the removal" in (await carol_stream.until("message")).data
    assert [e.event for e in rest] == ["ended"], rest
    assert "channel_forbidden" in rest[-1].data
    assert not any("after the removal" in e.data for e in rest)


async def test_deleting_a_channel_ends_its_live_pages(
    served: Served, hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    bob = await make_agent("bob")
    channel = await hub.channels.create(operator, ChannelSpec(name="g", members=["bob"]))
    await hub.channels.post(operator, channel.id, "before")
    async with served.browser() as bobs:
        await bobs.sign_in(bob.token)
        async with bobs.live(f"/ui/channels/{channel.id}/live") as stream:
            await stream.until_all(("message", "before"), ("tasks", ""))
            await hub.channels.delete(operator, channel.id)
            rest = await stream.to_end()
    assert [e.event for e in rest] == ["ended"], rest
    assert "channel_not_found" in rest[-1].data


# -- item 7: a session that ends ends its streams --------------------------------------------------
async def test_signing_out_ends_that_sessions_live_streams_and_no_other(
    served: Served, hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with served.browser() as one, served.browser() as two:
        await one.sign_in(alice.token)
        await two.sign_in(alice.token)
        async with (
            one.live("/ui/overview/live") as leaving,
            one.live("/ui/mail/live") as also_leaving,
            two.live("/ui/overview/live") as staying,
        ):
            for stream in (leaving, staying):
                await stream.until("overview")
            await also_leaving.until("inbox")
            await one.sign_out()
            for stream in (leaving, also_leaving):
                rest = await stream.to_end()
                assert [e.event for e in rest] == ["ended"], rest
                assert "You signed out" in rest[-1].data
            # The other session's stream goes on.
            await send(hub, bob.principal, "alice", body="still live")
            assert unread((await staying.until("overview")).data, "alice") == "1"
    assert served.live.open_count("alice") <= 1


async def test_a_session_evicted_by_a_new_sign_in_ends_its_live_streams(
    served: Served, hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    limit = hub.settings.ui_sessions_per_principal
    async with AsyncExitStack() as stack:
        oldest = await stack.enter_async_context(served.browser())
        await oldest.sign_in(alice.token)
        stream = await stack.enter_async_context(oldest.live("/ui/overview/live"))
        await stream.until("overview")
        for _ in range(limit):
            newer = await stack.enter_async_context(served.browser())
            assert (await newer.sign_in(alice.token)).status_code == 303
        rest = await stream.to_end()
    assert [e.event for e in rest] == ["ended"], rest
    assert "this was its oldest" in rest[-1].data


async def test_a_session_that_expires_ends_its_live_streams_at_once(
    served: Served, hub: Hub, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    clock = FakeClock()
    served.sessions._clock = clock.monotonic
    served.sessions._max_s = 100.0
    async with served.browser() as browser:
        await browser.sign_in(alice.token)
        # The session has moments left when its stream opens; the stream's own timer ends it
        # once the clock says it is over, with no request and no sweep.
        clock.advance(99.9)
        async with browser.live("/ui/overview/live") as stream:
            await stream.until("overview")
            clock.advance(0.1)
            rest = await stream.to_end()
    assert [e.event for e in rest] == ["ended"], rest
    assert "Your session expired" in rest[-1].data
    assert served.sessions.of("alice") == []


async def test_each_page_of_a_paged_list_is_its_own_live_panel(
    served: Served, hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    """Two pages of the channel list open at once are two panels: the second page's stream is
    never sent the first page's rendering (the page is part of what a panel shows)."""
    alice = await make_agent("alice")
    first = await hub.channels.create(operator, ChannelSpec(name="page-one", members=["alice"]))
    await hub.channels.create(operator, ChannelSpec(name="page-two", members=["alice"]))
    async with served.browser() as browser:
        await browser.sign_in(alice.token)
        async with (
            browser.live("/ui/channels/live") as whole,
            browser.live(f"/ui/channels/live?after={first.id}") as second,
        ):
            everything = (await whole.until("channels")).data
            after_first = (await second.until("channels")).data
    assert "page-one" in everything and "page-two" in everything
    assert "page-two" in after_first and "page-one" not in after_first
