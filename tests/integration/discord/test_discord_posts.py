"""The Discord bridge mirrors workers as forum posts (SPEC S6, seed 001 §2.7), with the REAL
discord.py client against a local fake Discord: titles with the state's emoji, archived when
finished, ONE edited summary in the parent's post, and Discord's 429 handled by discord.py."""

from __future__ import annotations

import asyncio

from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.workers import SpawnSpec, StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.discord import FakeDiscord
from tests.integration.discord.conftest import StartBridge, gated_agent


async def test_a_child_worker_gets_a_post_whose_title_follows_its_state(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    fake_discord: FakeDiscord,
    start_bridge: StartBridge,
) -> None:
    await gated_agent(make_agent, runtimes, "lead")
    helper = await gated_agent(make_agent, runtimes, "helper", reply="found 3 flaky tests")
    gate = helper.gate("flaky")
    bridge = await start_bridge()
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

    await fake_discord.wait_for(lambda f: any(t.name.startswith("🏃 [audit]") for t in f.posts()))
    post = fake_discord.post_named("[audit]: Find the flaky tests")
    assert post.name == "🏃 [audit]: Find the flaky tests"
    assert not post.archived
    # Its first message is the task-dispatch in short.
    first = next(iter(post.messages.values()))
    assert "Task from audit" in first and "Find the flaky tests" in first

    parent = fake_discord.post_named("[lead]: Audit the tests")
    await fake_discord.wait_for(
        lambda f: any("🏃" in m and "Children of" in m for m in parent.messages.values())
    )

    gate.set()
    await hub.tasks.wait_idle()
    await fake_discord.wait_for(lambda f: post.name.startswith("✅"))
    await fake_discord.wait_for(lambda f: post.archived)
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
        for r in fake_discord.made("POST", rf"/channels/{parent.id}/messages")
        if r.body["content"].startswith("**Children of")
    ]
    assert len(sent) == 1
    assert fake_discord.made("PATCH", rf"/channels/{parent.id}/messages/\d+")


async def test_a_rate_limited_rename_is_retried_by_discord_py_and_lands(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    fake_discord: FakeDiscord,
    start_bridge: StartBridge,
) -> None:
    lead = await gated_agent(make_agent, runtimes, "lead")
    gate = lead.gate("Audit")
    bridge = await start_bridge()
    await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await lead.started["Audit"].wait()
    await fake_discord.wait_for(lambda f: len(f.posts()) == 1)
    await bridge.settled()
    post = fake_discord.posts()[0]
    fake_discord.rate_limit("PATCH", rf"/channels/{post.id}", retry_after=0.05)

    gate.set()
    await hub.tasks.wait_idle()
    await fake_discord.wait_for(lambda f: post.name.startswith("💤"))
    patches = fake_discord.made("PATCH", rf"/channels/{post.id}")
    # The first rename met a 429; discord.py waited retry_after and sent it again.
    assert [r.status for r in patches] == [429, 200]
    assert patches[0].body == patches[1].body


async def test_state_changes_while_discord_is_busy_collapse_into_one_edit(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    fake_discord: FakeDiscord,
    start_bridge: StartBridge,
) -> None:
    lead = await gated_agent(make_agent, runtimes, "lead")
    gate = lead.gate("Audit")
    bridge = await start_bridge()
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await lead.started["Audit"].wait()
    await fake_discord.wait_for(lambda f: len(f.posts()) == 1)
    await bridge.settled()
    post = fake_discord.posts()[0]
    arrived, release = fake_discord.hold("PATCH", rf"/channels/{post.id}")

    gate.set()  # running → idle: the rename to 💤 is sent and Discord holds it
    await hub.tasks.wait_idle()
    async with asyncio.timeout(20):  # a guard against a hang, not a wait
        await arrived.wait()
    for text in ("and the lexer?", "and the parser?"):  # idle → running → idle, twice
        await hub.channels.post(operator, root.channel_id, text)
        await hub.tasks.wait_idle()
    release.set()
    await fake_discord.wait_for(
        lambda f: any("and the parser?" in m for m in post.messages.values())
    )
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
    renames = [r for r in fake_discord.made("PATCH", rf"/channels/{post.id}") if "name" in r.body]
    assert [r.body["name"] for r in renames] == ["💤 [lead]: Audit the tests"]
    assert post.name == "💤 [lead]: Audit the tests"


async def test_a_first_bridge_posts_unfinished_workers_but_not_the_hubs_history(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    fake_discord: FakeDiscord,
    start_bridge: StartBridge,
) -> None:
    lead = await gated_agent(make_agent, runtimes, "lead")
    gate = lead.gate("Write")
    old = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Old audit"))
    await hub.tasks.wait_idle()
    await hub.workers.release(operator, old.id)
    await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Write the report"))
    await lead.started["Write"].wait()

    bridge = await start_bridge()
    await fake_discord.wait_for(lambda f: len(f.posts()) == 1)
    await bridge.settled()
    assert [t.name for t in fake_discord.posts()] == ["🏃 [lead]: Write the report"]
    gate.set()
