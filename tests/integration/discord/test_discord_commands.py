"""Slash commands reach the service as the Discord user's linked hub identity (seed 001 §3.4);
an unlinked user is refused, and a link code works once."""

from __future__ import annotations

import asyncio

from parley.core.identity import Principal
from parley.service.bridge import create_link_code
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from parley.service.workers import StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.fakes.discord import FakeDiscord
from tests.integration.discord.conftest import StartBridge, gated_agent

MAPLE = 700000000000000001
STRANGER = 700000000000000002


async def run(fake: FakeDiscord, name: str, thread_id: int, user_id: int, **options: str) -> str:
    token = await fake.slash(name, options, thread_id=thread_id, user_id=user_id)
    await fake.wait_for(lambda f: f.reply_to(token) is not None)
    return str(fake.reply_to(token))


async def test_slash_commands_act_as_the_linked_principal_and_refuse_strangers(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    fake_discord: FakeDiscord,
    start_bridge: StartBridge,
) -> None:
    # A child spawned from chat runs as its parent's agent.
    lead = await gated_agent(make_agent, runtimes, "lead")
    await make_agent("critic", runtime={"kind": "scripted"})
    lead.gate("parser")
    await start_bridge()
    await fake_discord.identified.wait()
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await hub.tasks.wait_idle()
    await fake_discord.wait_for(lambda f: len(f.posts()) == 1)
    post = fake_discord.posts()[0]

    # A stranger is refused before anything reaches the hub.
    refused = await run(fake_discord, "spawn-child", post.id, STRANGER, prompt="rm -rf")
    assert "not linked" in refused
    assert (await hub.workers.get(operator, root.id)).children_worker_ids == []

    code = await create_link_code(hub, operator)
    assert "Linked" in await run(fake_discord, "link", post.id, MAPLE, code=code)
    # A code works once.
    assert "unknown, used or expired" in await run(fake_discord, "link", 1, STRANGER, code=code)

    reply = await run(fake_discord, "spawn-child", post.id, MAPLE, prompt="Check the parser")
    root = await hub.workers.get(operator, root.id)
    assert len(root.children_worker_ids) == 1
    child = await hub.workers.get(operator, root.children_worker_ids[0])
    assert child.created_by == "operator"
    assert child.id in reply
    async with asyncio.timeout(20):  # a guard against a hang, not a wait
        await lead.started["parser"].wait()
    await fake_discord.wait_for(lambda f: len(f.posts()) == 2)

    topology = await run(fake_discord, "topology", post.id, MAPLE)
    assert root.id in topology and child.id in topology

    cancelled = await run(fake_discord, "cancel-child", post.id, MAPLE, child=child.id)
    assert child.id in cancelled
    assert (await hub.workers.get(operator, child.id)).state == "killed"

    await run(fake_discord, "spawn-child", post.id, MAPLE, prompt="Check the lexer")
    await hub.tasks.wait_idle()
    root = await hub.workers.get(operator, root.id)
    lexer = await hub.workers.get(operator, root.children_worker_ids[1])
    await run(fake_discord, "relay", post.id, MAPLE, child=lexer.id, message="use the new grammar")
    async with hub.store.read() as tx:
        relayed = [
            m for m in await tx.channel_messages(lexer.channel_id) if "new grammar" in m.content
        ]
    assert [(m.sender_id, m.sender_kind) for m in relayed] == [("operator", "human")]

    took = await run(fake_discord, "takeover", post.id, MAPLE, instruction="stop and summarise")
    assert took.startswith("Took over")
    await hub.tasks.wait_idle()
    async with hub.store.read() as tx:
        e = tx.table("events").c
        kinds = [r.type for r in await tx.select("events", e.subject == f"worker:{root.id}")]
    assert "system.takeover_initiated" in kinds

    discussed = await run(
        fake_discord, "discuss", post.id, MAPLE, members="critic", guide="Is the audit complete?"
    )
    assert "Discussion channel" in discussed
    await fake_discord.wait_for(lambda f: any(t.name.startswith("💬") for t in f.posts()))


async def test_a_link_binds_to_the_human_who_asked_and_commands_use_their_rights(
    hub: Hub,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    fake_discord: FakeDiscord,
    start_bridge: StartBridge,
) -> None:
    await gated_agent(make_agent, runtimes, "lead")
    created = await hub.identity.create_human(operator, HumanSpec(id="maple", display_name="M"))
    maple = created.principal
    await start_bridge()
    await fake_discord.identified.wait()
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await hub.tasks.wait_idle()
    await fake_discord.wait_for(lambda f: len(f.posts()) == 1)
    post = fake_discord.posts()[0]

    code = await create_link_code(hub, maple)
    assert "'maple'" in await run(fake_discord, "link", post.id, MAPLE, code=code)
    # Maple is not the operator and not in this worker's tree: the service refuses, and says so.
    refused = await run(fake_discord, "spawn-child", post.id, MAPLE, prompt="Check the parser")
    assert refused.startswith("Refused (worker_forbidden)")
    assert (await hub.workers.get(operator, root.id)).children_worker_ids == []
