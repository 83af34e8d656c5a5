"""Every discussion channel an agent opens (seed 000) gets a post of its own: the moderator's
kickoff and the members' speeches are relayed by the bot, and the post is locked and archived
when the discussion closes."""

from __future__ import annotations

from pathlib import Path

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.hub import Hub
from tests.integration.discord.conftest import DiscordHub


async def test_a_discussion_channel_is_mirrored_and_closed_in_its_own_post(
    hub: Hub, operator: Principal, chat: DiscordHub, tmp_path: Path
) -> None:
    lead = await chat.make_agent(
        "lead", runtime={"kind": "scripted"}, workspace=str(tmp_path / "l")
    )
    await chat.make_agent(
        "rev",
        runtime={"kind": "scripted"},
        workspace=str(tmp_path / "r"),
        accepts_channels_from=["lead"],
    )

    def says(name: str):  # type: ignore[no-untyped-def]
        def reply(turn: Turn) -> str:
            return f"{name} thinks a ring buffer [[DISCUSSION_DONE]]"

        return reply

    chat.runtimes.set("lead", ScriptedRuntime(says("lead")))
    chat.runtimes.set("rev", ScriptedRuntime(says("rev")))
    bridge = await chat.start_bridge()
    assert lead.principal.work_channel_id is not None
    channel = await hub.discussions.create_private_channel(
        lead.principal, "queue design", ["rev"], lead.principal.work_channel_id, "Pick a queue"
    )
    await hub.tasks.wait_idle()

    await chat.fake.wait_for(lambda f: any(t.name == "💬 queue design" for t in f.posts()))
    post = chat.fake.post_named("queue design")
    first = next(iter(post.messages.values()))
    assert "Pick a queue" in first and "lead" in first and "rev" in first
    await chat.fake.wait_for(
        lambda f: any(m.startswith("**🧭 moderator**") for m in post.messages.values())
    )
    await chat.fake.wait_for(
        lambda f: any(m.startswith("**rev**: rev thinks") for m in post.messages.values())
    )

    await hub.discussions.force_close(operator, channel.id, "enough")
    await chat.fake.wait_for(lambda f: post.name == "🔒 queue design" and post.archived)
    await bridge.settled()
    assert len([t for t in chat.fake.posts() if "queue design" in t.name]) == 1
