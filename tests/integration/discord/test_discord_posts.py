"""The Discord bridge mirrors workers as forum posts (SPEC S6, seed 001 §2.7), with the REAL
discord.py client against a local fake Discord: titles with the state's emoji, archived when
finished, ONE edited summary in the parent's post, and Discord's 429 handled by discord.py."""

from __future__ import annotations

import asyncio

from parley.core.identity import Principal
from parley.core.workers import Worker
from parley.service.bridge.bridge import Bridge
from parley.service.hub import Hub
from parley.service.workers.records import SpawnSpec, StartSpec
from tests.fakes.discord import Thread
from tests.integration.discord.conftest import DiscordHub


async def lead_in_its_first_turn(chat: DiscordHub) -> tuple[asyncio.Event, Bridge, Worker, Thread]:
    """A running bridge and a root worker of "lead" whose first turn waits on the returned gate,
    its post opened and the bridge settled."""
    lead = await chat.gated_agent("lead")
    gate = lead.gate("Audit")
    bridge = await chat.start_bridge()
    root = await chat.hub.workers.start(
        chat.operator, StartSpec(agent_id="lead", prompt="Audit the tests")
    )
    await lead.started["Audit"].wait()
    post = await chat.only_post()
    await bridge.settled()
    return gate, bridge, root, post


async def test_a_child_worker_gets_a_post_whose_title_follows_its_state(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    await chat.gated_agent("lead")
    helper = await chat.gated_agent("helper", reply="found 3 flaky tests")
    gate = helper.gate("flaky")
    bridge = await chat.start_bridge()
    root = await hub.workers.start(
        operator, StartSpec(agent_id="lead", prompt="Audit the tests", name="audit")
    )
    await hub.tasks.wait_idle()
    child = await hub.workers.spawn(
        operator,
        root.id,
        SpawnSpec(prompt="Find the flaky tests\nin the parser", agent_id="helper"),
    )
    await helper.started["flaky"].wait()

    await chat.fake.wait_for(lambda f: any(t.name.startswith("🏃 [audit]") for t in f.posts()))
    post = chat.fake.post_named("[audit]: Find the flaky tests")
    assert post.name == "🏃 [audit]: Find the flaky tests"
    assert not post.archived
    # Its first message is the task-dispatch in short.
    first = next(iter(post.messages.values()))
    assert "Task from audit" in first and "Find the flaky tests" in first

    parent = chat.fake.post_named("[lead]: Audit the tests")
    await chat.fake.wait_for(
        lambda f: any("🏃" in m and "Children of" in m for m in parent.messages.values())
    )

    gate.set()
    await hub.tasks.wait_idle()
    await chat.fake.wait_for(lambda f: post.name.startswith("✅"))
    await chat.fake.wait_for(lambda f: post.archived)
    await bridge.settled()
    assert post.name == "✅ [audit]: Find the flaky tests"

    # The parent's post keeps ONE summary message, edited as its child moved.
    summaries = [m for m in parent.messages.values() if m.startswith("**Children of")]
    assert len(summaries) == 1
    async with hub.store.read() as tx:
        session = await tx.get("sessions", child.session_id)
    child_name = session.display_name.rsplit(" / ", 1)[-1]
    assert f"✅ {child_name} — completed" in summaries[0]
    assert "found 3 flaky tests" in summaries[0]
    sent = [
        r
        for r in chat.fake.made("POST", rf"/channels/{parent.id}/messages")
        if r.body["content"].startswith("**Children of")
    ]
    assert len(sent) == 1
    assert chat.fake.made("PATCH", rf"/channels/{parent.id}/messages/\d+")


async def test_a_rate_limited_rename_is_retried_by_discord_py_and_lands(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    gate, _, _, post = await lead_in_its_first_turn(chat)
    chat.fake.rate_limit("PATCH", rf"/channels/{post.id}", retry_after=0.05)

    gate.set()
    await hub.tasks.wait_idle()
    await chat.fake.wait_for(lambda f: post.name.startswith("💤"))
    patches = chat.fake.made("PATCH", rf"/channels/{post.id}")
    # The first rename met a 429; discord.py waited retry_after and sent it again.
    assert [r.status for r in patches] == [429, 200]
    assert patches[0].body == patches[1].body


async def test_state_changes_while_discord_is_busy_collapse_into_one_edit(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    gate, bridge, root, post = await lead_in_its_first_turn(chat)
    arrived, release = chat.fake.hold("PATCH", rf"/channels/{post.id}")

    gate.set()  # running → idle: the rename to 💤 is sent and Discord holds it
    await hub.tasks.wait_idle()
    async with asyncio.timeout(20):  # a guard against a hang, not a wait
        await arrived.wait()
    for text in ("and the lexer?", "and the parser?"):  # idle → running → idle, twice
        await hub.channels.post(operator, root.channel_id, text)
        await hub.tasks.wait_idle()
    release.set()
    await chat.fake.wait_for(lambda f: any("and the parser?" in m for m in post.messages.values()))
    await bridge.settled()

    async with hub.store.read() as tx:
        e = tx.table("events").c
        moves = [
            r.type
            for r in await tx.select("events", e.subject == f"worker:{root.id}")
            if r.type in ("worker.running", "worker.idle")
        ]
    assert moves.count("worker.idle") == 3
    # Four state changes after the post opened, one rename: the sync read the state once
    # Discord answered, and the worker was idle again, as the title already said.
    renames = [r for r in chat.fake.made("PATCH", rf"/channels/{post.id}") if "name" in r.body]
    assert [r.body["name"] for r in renames] == ["💤 [lead]: Audit the tests"]
    assert post.name == "💤 [lead]: Audit the tests"


async def test_a_first_bridge_posts_unfinished_workers_but_not_the_hubs_history(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    lead = await chat.gated_agent("lead")
    gate = lead.gate("Write")
    old = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Old audit"))
    await hub.tasks.wait_idle()
    await hub.workers.release(operator, old.id)
    await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Write the report"))
    await lead.started["Write"].wait()

    bridge = await chat.start_bridge()
    await chat.fake.wait_for(lambda f: len(f.posts()) == 1)
    await bridge.settled()
    assert [t.name for t in chat.fake.posts()] == ["🏃 [lead]: Write the report"]
    gate.set()
