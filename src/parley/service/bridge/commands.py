"""The chat bridge's slash commands (seed 001 §3.4), each the existing service call made as the
caller's linked principal. A worker command runs in a worker's post and acts on that worker;
what the service refuses is answered with its code and message (``Bridge.on_command``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from parley.core import bridge as br
from parley.core import workers as wk
from parley.core.bridge import BridgePlace, CommandCall
from parley.core.errors import InvalidRequest, NotFound
from parley.core.identity import Principal
from parley.core.workers import Worker
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.workers.records import SpawnSpec
from parley.service.workers.views import session_names


class Bridge(Protocol):
    """What a command needs of the bridge that runs it (:class:`~.bridge.Bridge` is one): the
    hub, the worker whose post the command was run in, and a post of its own for a channel."""

    @property
    def hub(self) -> Hub: ...

    async def worker_here(self, place_id: str) -> Worker: ...

    async def open_channel_post(self, channel_id: str, title: str, first: str) -> BridgePlace: ...


def _option(call: CommandCall, name: str) -> str:
    value = call.options.get(name, "").strip()
    if not value:
        raise InvalidRequest(f"/{call.name} needs {name!r}", code="missing_option")
    return value


async def takeover(bridge: Bridge, who: Principal, call: CommandCall) -> str:
    worker = await bridge.worker_here(call.place_id)
    outcome = await bridge.hub.workers.takeover(who, worker.id, _option(call, "instruction"))
    how = "after interrupting its turn" if outcome.interrupted else "at its next turn"
    late = " (its turn did not stop in time; the instruction supersedes it)" * outcome.timed_out
    return f"Took over worker {worker.id} {how}{late}."


async def spawn_child(bridge: Bridge, who: Principal, call: CommandCall) -> str:
    worker = await bridge.worker_here(call.place_id)
    child = await bridge.hub.workers.spawn(
        who, worker.id, SpawnSpec(prompt=_option(call, "prompt"))
    )
    return f"Spawned child worker {child.id}; its post opens in the forum."


async def _child(bridge: Bridge, who: Principal, parent: Worker, ref: str) -> Worker:
    """A child of ``parent`` named by id, the start of its id, or its name; the caller must
    be allowed to see it. The children and their names come in one read, not one per child."""
    async with bridge.hub.store.read() as tx:
        w = tx.table("workers").c
        rows: list[Worker] = await tx.select("workers", w.id.in_(parent.children_worker_ids))
        order = {child_id: i for i, child_id in enumerate(parent.children_worker_ids)}
        children = sorted(rows, key=lambda child: order[child.id])  # the first spawned wins
        names = await session_names(tx, (child.session_id for child in children))
        for child in children:
            name = br.last_part(names[child.session_id]) if child.session_id in names else ""
            if ref in (child.id, name) or (len(ref) >= 6 and child.id.startswith(ref)):
                return await bridge.hub.workers.visible(tx, who, child.id)
    raise NotFound(
        f"worker {parent.id!r} has no child {ref!r}; name it by id or by its name",
        code="child_not_found",
    )


async def cancel_child(bridge: Bridge, who: Principal, call: CommandCall) -> str:
    parent = await bridge.worker_here(call.place_id)
    child = await _child(bridge, who, parent, _option(call, "child"))
    # Seed 001 §3.4: a cancel from chat stops that child only, not the children it spawned.
    done = await bridge.hub.workers.cancel(
        who, child.id, reason="cancelled from chat", propagate=False
    )
    return f"Cancelled {', '.join(w.id for w in done) or 'nothing (already finished)'}."


async def relay(bridge: Bridge, who: Principal, call: CommandCall) -> str:
    parent = await bridge.worker_here(call.place_id)
    child = await _child(bridge, who, parent, _option(call, "child"))
    posted = await bridge.hub.channels.post(who, child.channel_id, _option(call, "message"))
    return f"Relayed to {child.id} (message {posted.message.id})."


def _tree_lines(nodes: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for node, depth in wk.walk(nodes):
        emoji = br.STATUS_EMOJI.get(str(node["state"]), "❔")
        lines.append(f"{'  ' * depth}{emoji} {node['id']} ({node['agent_id']}, {node['state']})")
    return lines


async def topology(bridge: Bridge, who: Principal, call: CommandCall) -> str:
    worker = await bridge.worker_here(call.place_id)
    view = await bridge.hub.workers.topology(who, worker.session_id)
    lines = [f"**{view['session']['display_name']}**", *_tree_lines(view["tree"])]
    return br.cut("\n".join(lines), br.MESSAGE_MAX)


async def discuss(bridge: Bridge, who: Principal, call: CommandCall) -> str:
    """A private group channel of the named agents with the caller, mirrored as a post of its
    own; the guide is the caller's first message, which starts the discussion."""
    members = [m for m in _option(call, "members").replace(",", " ").split() if m]
    guide = _option(call, "guide")
    name = br.cut(br.one_line(guide), 60)
    channel = await bridge.hub.channels.create(
        who, ChannelSpec(name=name, kind="group", members=[who.id, *members], private=True)
    )
    place = await bridge.open_channel_post(
        channel.id, f"💬 {name}", f"**Discussion** with {', '.join(members)}"
    )
    await bridge.hub.channels.post(who, channel.id, guide)
    return f"Discussion channel {channel.id} opened; follow it in its post ({place.place_id})."


Command = Callable[["Bridge", Principal, CommandCall], Awaitable[str]]
# ``/link`` is the bridge's own (it needs no linked principal).
COMMANDS: Mapping[str, Command] = {
    "takeover": takeover,
    "spawn-child": spawn_child,
    "cancel-child": cancel_child,
    "topology": topology,
    "relay": relay,
    "discuss": discuss,
}
