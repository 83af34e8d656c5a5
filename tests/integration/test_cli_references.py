"""What the CLI's tables show is what its commands take: an id shortened to a unique start in a
table addresses the mail, task, worker or meeting it stands for; a channel option takes a
channel's name as its arguments do; an agent joins a room by the room's name; ``parley search``
takes several words, as docs/usage.md writes it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import CliRunner

from parley.core.identity import Principal
from parley.core.mail import SendRequest
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.service.workers.records import StartSpec
from parley.surfaces.cli.app import app
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import members, room_with
from tests.integration.test_channels import Served


class Cli:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.runner = CliRunner()

    def invoke(self, *args: str, token: str | None = None) -> Any:
        base = ["--url", self.url, "--token", token or self.token, "--json"]
        return self.runner.invoke(app, [*base, *args])

    async def ok(self, *args: str, token: str | None = None) -> Any:
        result = await asyncio.to_thread(self.invoke, *args, token=token)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    async def refused(self, *args: str, token: str | None = None) -> str:
        result = await asyncio.to_thread(self.invoke, *args, token=token)
        assert result.exit_code == 1, result.output
        return str(result.output)


async def test_short_ids_of_mail_tasks_workers_and_meetings_address_them(
    hub: Hub, operator: Principal, make_agent: MakeAgent, port: int
) -> None:
    scripted = {"kind": "scripted", "replies": ["ok"], "cycle": True}
    alice = await make_agent("alice", runtime=scripted)
    bob = await make_agent("bob", runtime=scripted)
    sent = (
        await hub.mail.send(
            operator, SendRequest(to="alice", kind="task", subject="Review the parser", body="x")
        )
    ).message
    worker = await hub.workers.start(operator, StartSpec(agent_id="alice", prompt="go"))
    design = await hub.channels.create(
        operator, ChannelSpec(name="design", members=["operator", "alice", "bob"])
    )
    posted = await hub.channels.post(operator, design.id, "Option A or B?")
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))
        # The first ten characters, as an 80-column table shows them.
        shown = await cli.ok("mail", "show", sent.id[:10])
        assert shown["id"] == sent.id
        task = await cli.ok("task", "show", posted.task_id[:10].lower())
        assert task["id"] == posted.task_id
        found = await cli.ok("worker", "show", worker.id[:12])
        assert found["id"] == worker.id
        # Options that name a worker take its start too.
        tree = await cli.ok("usage", "--by", "tree", "--worker", worker.id[:12])
        assert tree["by"] == "tree"
        await cli.ok("usage", "budget", "set", "--worker", worker.id[:12], "--tokens", "9")
        budgets = await cli.ok("usage", "budget", "list")
        assert [b["budget"]["key"] for b in budgets] == [worker.id]
        cleared = await cli.ok("usage", "budget", "clear", "--worker", worker.id[:12])
        assert cleared == {"removed": True}
        # An agent reaches by a short id only what it may see: bob not alice's mail.
        hidden = await cli.refused("mail", "show", sent.id[:10], token=bob.token)
        assert "error [message_not_found]" in hidden and sent.id not in hidden
        # A start too short to mean anything is not looked up.
        assert "message_not_found" in await cli.refused("mail", "show", sent.id[:3])
        closed = await cli.ok("mail", "close", sent.id[:10], token=alice.token)
        assert (closed["id"], closed["status"]) == (sent.id, "closed")


async def test_a_start_several_mails_share_is_refused_with_the_candidates(
    hub: Hub, operator: Principal, make_agent: MakeAgent, port: int
) -> None:
    await make_agent("alice")
    sent = [
        (
            await hub.mail.send(operator, SendRequest(to="alice", kind="notice", subject=f"n{i}"))
        ).message
        for i in range(2)
    ]
    common = next(i for i in range(26) if sent[0].id[i] != sent[1].id[i])
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))
        # Sent one after the other: their ids start alike (the time comes first).
        assert common >= 4
        refused = await cli.refused("mail", "show", sent[0].id[:common])
        assert "error [ambiguous_message]" in refused
        assert sent[0].id in refused and sent[1].id in refused
        one = await cli.ok("mail", "show", sent[1].id[: common + 1])
        assert one["id"] == sent[1].id


async def test_channel_options_take_names_and_search_takes_several_words(
    hub: Hub, operator: Principal, make_agent: MakeAgent, port: int
) -> None:
    await make_agent("alice")
    design = await hub.channels.create(operator, ChannelSpec(name="design", members=["operator"]))
    await hub.channels.post(operator, design.id, "parser quotes are broken")
    other = await hub.channels.create(operator, ChannelSpec(name="other", members=["operator"]))
    await hub.channels.post(operator, other.id, "parser quotes elsewhere")
    await hub.tasks.wait_idle()
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))
        hits = await cli.ok("search", "parser", "quotes", "--channel", "design")
        assert [h["channel_id"] for h in hits] == [design.id]
        assert await cli.ok("search", "parser", "nowhere") == []
        by_prefix = await cli.ok("search", "parser", "--channel", other.id[:12])
        assert [h["channel_id"] for h in by_prefix] == [other.id]
        unknown = await cli.refused("search", "parser", "--channel", "no-such-channel")
        assert "error [channel_not_found]" in unknown
        usage = await cli.ok("usage", "--discussion", "design")
        assert usage["groups"] == []
        # The event log's subjects read KIND:ID; a name or an id's start works there too.
        about = await cli.ok("events", "--subject", "channel:design")
        assert about and {e["subject"] for e in about} == {f"channel:{design.id}"}
        assert "channel_not_found" in await cli.refused("events", "--subject", "channel:nope")
        assert await cli.ok("events", "--subject", "alice", "--type", "agent.created")


async def test_an_agent_joins_a_room_by_its_name(
    hub: Hub, operator: Principal, make_agent: MakeAgent, port: int
) -> None:
    alice = await make_agent("alice")
    room = await hub.rooms.create(operator, RoomSpec(name="sync"))
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))
        joined = await cli.ok("room", "join", "sync", token=alice.token)
        assert joined["room_id"] == room.id
        # Seeing it is still for members: an outsider's other reads of it by name find nothing.
        bob = await make_agent("bob")
        assert "room_not_found" in await cli.refused("room", "show", "sync", token=bob.token)


async def test_a_meetings_short_id_addresses_it(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, port: int
) -> None:
    await members(make_agent, runtimes, ["m"])
    room = await room_with(hub, operator, ["m"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="plan"))
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))
        # "mtg-" and ten characters, as a table shows it, or the ten alone.
        for ref in (meeting.id[:14], meeting.id.removeprefix("mtg-")[:10]):
            shown = await cli.ok("room", "meeting", ref)
            assert shown["meeting"]["id"] == meeting.id
        assert (await cli.ok("usage", "--meeting", meeting.id[:14]))["by"] == "agent"
        unknown = await cli.refused("usage", "--meeting", "mtg-0000")
        assert "error [meeting_not_found]" in unknown


async def test_a_session_is_addressed_by_its_name_or_the_start_of_its_id(
    hub: Hub, operator: Principal, make_agent: MakeAgent, port: int
) -> None:
    alice = await make_agent("alice", runtime={"kind": "scripted", "replies": ["ok"]})
    bob = await make_agent("bob")
    worker = await hub.workers.start(
        operator, StartSpec(agent_id="alice", prompt="go", name="audit")
    )
    await hub.tasks.wait_idle()
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))
        # As docs/workers.md writes it: `parley worker start … --name audit`, then
        # `parley worker topology <session>`.
        for ref in ("audit", worker.session_id.removeprefix("vs-").lower()):
            shown = await cli.ok("worker", "topology", ref)
            assert shown["session"]["id"] == worker.session_id
        mine = await cli.ok("worker", "topology", "audit", token=alice.token)
        assert mine["session"]["id"] == worker.session_id
        # Another agent's session is not found by its name.
        hidden = await cli.refused("worker", "topology", "audit", token=bob.token)
        assert "error [session_not_found]" in hidden and worker.session_id not in hidden


async def test_mail_is_addressed_to_a_channel_or_session_by_name_and_replies_by_id_start(
    hub: Hub, operator: Principal, make_agent: MakeAgent, port: int
) -> None:
    await make_agent("alice", runtime={"kind": "scripted", "replies": ["ok"]})
    await make_agent("bob")
    design = await hub.channels.create(
        operator, ChannelSpec(name="design", members=["operator", "alice", "bob"])
    )
    worker = await hub.workers.start(
        operator, StartSpec(agent_id="alice", prompt="go", name="audit")
    )
    await hub.tasks.wait_idle()
    first = (
        await hub.mail.send(operator, SendRequest(to="bob", kind="task", subject="first"))
    ).message
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))
        to_channel = await cli.ok(
            "mail", "send", "channel:design", "--subject", "hello", "--parent", first.id[:-1]
        )
        assert to_channel["parent_message_id"] == first.id
        to_session = await cli.ok("mail", "send", "session:audit", "--subject", "s")
        assert (to_session["to_kind"], to_session["to_id"]) == ("session", worker.session_id)
        assert (to_channel["to_kind"], to_channel["to_id"]) == ("channel", design.id)
        line = await asyncio.to_thread(
            cli.runner.invoke,
            app,
            ["--url", served.url, "--token", cli.token, "mail", "send", "channel:design"],
        )
        assert line.exit_code == 0 and line.output.rstrip().endswith("to channel:design")
        assert "channel_not_found" in await cli.refused("mail", "send", "channel:nope")


async def test_a_worker_tree_and_watch_take_the_start_of_its_id(
    hub: Hub, operator: Principal, make_agent: MakeAgent, port: int
) -> None:
    await make_agent("alice", runtime={"kind": "scripted", "replies": ["ok"]})
    worker = await hub.workers.start(operator, StartSpec(agent_id="alice", prompt="go"))
    await hub.tasks.wait_idle()
    await hub.workers.cancel(operator, worker.id, reason="done here")
    async with Served(hub, port) as served:
        cli = Cli(served.url, str(hub.operator_token))

        def plain(*args: str) -> Any:
            return cli.runner.invoke(
                app, ["--url", served.url, "--token", cli.token, *args], env={"COLUMNS": "120"}
            )

        drawn = await asyncio.to_thread(plain, "worker", "tree", worker.id[:12])
        assert drawn.exit_code == 0, drawn.output
        node = next(line for line in drawn.output.splitlines() if "killed" in line)
        assert worker.id in node and "◀" in node, drawn.output
        # The watch of an ended worker ends at once, named by the start of its id as by its id.
        watched = await asyncio.to_thread(plain, "worker", "watch", worker.id[:12])
        assert watched.exit_code == 0, watched.output
        assert f"{worker.id} ended: killed" in watched.output
