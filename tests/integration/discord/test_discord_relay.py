"""Messages relayed both ways exactly once (SPEC S6): a worker's replies go out to its post, a
linked person's message in the post reaches the worker as their post (and is not echoed back),
a redelivered or unlinked message does nothing in the hub, and a restarted bridge neither
misses what happened while it was down nor posts anything twice."""

from __future__ import annotations

from parley.core.identity import Principal
from parley.service.bridge.bridge import Bridge
from parley.service.hub import Hub
from tests.fakes.discord import Thread
from tests.integration.discord.conftest import MAPLE, STRANGER, DiscordHub


async def hub_messages(hub: Hub, channel_id: str, content: str) -> list[str]:
    async with hub.store.read() as tx:
        rows = await tx.channel_messages(channel_id)
    return [m.id for m in rows if m.content == content]


def said(post: Thread, fragment: str) -> int:
    return sum(fragment in m for m in post.messages.values())


async def started_worker(chat: DiscordHub, bridge: Bridge) -> tuple[str, Thread]:
    root, post = await chat.start_worker()
    await chat.fake.wait_for(lambda f: said(post, "**lead**: report #1") == 1)
    await bridge.settled()
    return root.channel_id, post


class Counter:
    """Replies ``report #n`` to its n-th turn."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"report #{self.n}"


async def test_relays_go_both_ways_once_and_unlinked_people_are_refused(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    lead = await chat.gated_agent("lead")
    count = Counter()
    lead.reply_fn = count
    bridge = await chat.start_bridge()
    await chat.fake.identified.wait()
    channel_id, post = await started_worker(chat, bridge)
    assert "Linked" in await chat.link(operator, MAPLE)

    message_id = await chat.fake.user_message(post.id, "check the parser too", user_id=MAPLE)
    # The person's message woke the worker; its reply came back out.
    await chat.fake.wait_for(lambda f: said(post, "**lead**: report #2") == 1)
    posted = await hub_messages(hub, channel_id, "check the parser too")
    assert len(posted) == 1
    async with hub.store.read() as tx:
        message = await tx.get("channel_messages", posted[0])
    assert message.sender_id == "operator" and message.sender_kind == "human"
    assert message.metadata["discord_message_id"] == str(message_id)

    # Discord delivers the same message again (a resumed gateway): nothing new in the hub.
    await chat.fake.redeliver(post.id, message_id, "check the parser too", MAPLE)
    # A stranger's message is refused in the post, and never reaches the hub.
    await chat.fake.user_message(post.id, "delete everything", user_id=STRANGER)
    await chat.fake.wait_for(lambda f: said(post, "is not linked to a parley identity") == 1)
    await bridge.inbound_settled(3)
    await hub.tasks.wait_idle()
    await bridge.settled()
    assert len(await hub_messages(hub, channel_id, "check the parser too")) == 1
    assert await hub_messages(hub, channel_id, "delete everything") == []
    assert count.n == 2
    # No echo: the bot never posted the person's own words back.
    assert said(post, "check the parser too") == 0


async def test_a_restarted_bridge_catches_up_without_posting_anything_twice(
    hub: Hub, operator: Principal, chat: DiscordHub
) -> None:
    lead = await chat.gated_agent("lead")
    lead.reply_fn = Counter()
    first = await chat.start_bridge()
    channel_id, post = await started_worker(chat, first)
    await first.close()

    # While no bridge runs, a person posts in the hub and the worker answers.
    await hub.channels.post(operator, channel_id, "and the lexer?")
    await hub.tasks.wait_idle()

    # The relays of the first bridge "were lost" after Discord got them (a crash between the
    # send and its record): the new bridge resends, and Discord recognises the nonces.
    async def forget(tx):  # type: ignore[no-untyped-def]
        await tx.update("bridge_places", channel_id, last_seq=0)

    await hub.store.write(forget)
    second = await chat.start_bridge()
    await chat.fake.wait_for(lambda f: said(post, "**lead**: report #2") == 1)
    await second.settled()

    assert len(chat.fake.posts()) == 1
    assert said(post, "**lead**: report #1") == 1
    assert said(post, "**operator**: and the lexer?") == 1
    assert len([m for m in post.messages.values() if m.startswith("**Children of")]) == 0
    assert post.name.startswith("💤 [lead]")
