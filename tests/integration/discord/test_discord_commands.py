"""Slash commands reach the service as the Discord user's linked hub identity (seed 001 §3.4);
an unlinked user is refused, and a link code works once."""

from __future__ import annotations

import asyncio

from parley.core.bridge import last_part
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from tests.integration.discord.conftest import MAPLE, STRANGER, DiscordHub


async def test_slash_commands_act_as_the_linked_principal_and_refuse_strangers(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    # A child spawned from chat runs as its parent's agent.
    lead = await chat.gated_agent("lead")
    await chat.make_agent("critic", runtime={"kind": "scripted"})
    lead.gate("parser")
    await chat.start_bridge()
    await chat.fake.identified.wait()
    root, post = await chat.start_worker()

    # A stranger is refused before anything reaches the hub.
    refused = await chat.slash("spawn-child", post.id, STRANGER, prompt="rm -rf")
    assert "not linked" in refused
    assert (await hub.workers.get(operator, root.id)).children_worker_ids == []

    code = (await hub.bridge_links.create_code(operator)).code
    assert "Linked" in await chat.slash("link", post.id, MAPLE, code=code)
    # A code works once.
    assert "unknown, used or expired" in await chat.slash("link", 1, STRANGER, code=code)

    reply = await chat.slash("spawn-child", post.id, MAPLE, prompt="Check the parser")
    root = await hub.workers.get(operator, root.id)
    assert len(root.children_worker_ids) == 1
    child = await hub.workers.get(operator, root.children_worker_ids[0])
    assert child.created_by == "operator"
    assert child.id in reply
    async with asyncio.timeout(20):  # a guard against a hang, not a wait
        await lead.started["parser"].wait()
    await chat.fake.wait_for(lambda f: len(f.posts()) == 2)

    topology = await chat.slash("topology", post.id, MAPLE)
    assert root.id in topology and child.id in topology

    cancelled = await chat.slash("cancel-child", post.id, MAPLE, child=child.id)
    assert child.id in cancelled
    assert (await hub.workers.get(operator, child.id)).state == "killed"

    await chat.slash("spawn-child", post.id, MAPLE, prompt="Check the lexer")
    await hub.tasks.wait_idle()
    root = await hub.workers.get(operator, root.id)
    lexer = await hub.workers.get(operator, root.children_worker_ids[1])
    await chat.slash("relay", post.id, MAPLE, child=lexer.id, message="use the new grammar")
    async with hub.store.read() as tx:
        relayed = [
            m for m in await tx.channel_messages(lexer.channel_id) if "new grammar" in m.content
        ]
    assert [(m.sender_id, m.sender_kind) for m in relayed] == [("operator", "human")]
    # A child is also named by its name; a name no child has is refused with its code.
    async with hub.store.read() as tx:
        lexer_session = await tx.get("sessions", lexer.session_id)
    by_name = await chat.slash(
        "relay", post.id, MAPLE, child=last_part(lexer_session.display_name), message="hi"
    )
    assert by_name.startswith(f"Relayed to {lexer.id}")
    unknown = await chat.slash("relay", post.id, MAPLE, child="nobody", message="hi")
    assert unknown.startswith("Refused (child_not_found)")

    took = await chat.slash("takeover", post.id, MAPLE, instruction="stop and summarise")
    assert took.startswith("Took over")
    await hub.tasks.wait_idle()
    async with hub.store.read() as tx:
        e = tx.table("events").c
        kinds = [r.type for r in await tx.select("events", e.subject == f"worker:{root.id}")]
    assert "system.takeover_initiated" in kinds

    discussed = await chat.slash(
        "discuss", post.id, MAPLE, members="critic", guide="Is the audit complete?"
    )
    assert "Discussion channel" in discussed
    await chat.fake.wait_for(lambda f: any(t.name.startswith("💬") for t in f.posts()))


async def test_a_link_binds_to_the_human_who_asked_and_commands_use_their_rights(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    await chat.gated_agent("lead")
    created = await hub.identity.create_human(operator, HumanSpec(id="maple", display_name="M"))
    maple = created.principal
    await chat.start_bridge()
    await chat.fake.identified.wait()
    root, post = await chat.start_worker()

    assert "'maple'" in await chat.link(maple, MAPLE, thread_id=post.id)
    # Maple is not the operator and not in this worker's tree: the service refuses as a read of
    # the worker would, as missing.
    refused = await chat.slash("spawn-child", post.id, MAPLE, prompt="Check the parser")
    assert refused.startswith("Refused (worker_not_found)")
    assert (await hub.workers.get(operator, root.id)).children_worker_ids == []
