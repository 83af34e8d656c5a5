"""The chat bridge (SPEC S6): mirrors workers and their channels on a chat platform and brings
people's messages and slash commands back into the hub, through a :class:`ChatBridge` port.

The bridge only maps and relays: every rule stays in the service it calls (a person's message is
an ordinary human post, so supersede and wake rules apply untouched; a slash command is the
worker or channel call made as the person's linked principal). What it keeps is the mapping
(``bridge_places``), the relays made (``bridge_relays``) and the linked users, so a restarted
bridge picks up where the last one stopped without posting anything twice.

One loop applies the changes: events only mark a worker or channel *dirty*, and a sync reads the
current state from the store. While the platform makes the bridge wait (a rate limit), further
state changes of the same worker collapse into one edit: rapid changes are coalesced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from parley.core import bridge as br
from parley.core.bridge import (
    BridgePlace,
    BridgeRelay,
    ChatBridge,
    ChildLine,
    CommandCall,
    InboundMessage,
)
from parley.core.channels import Channel, ChannelMessage, LogicalSession
from parley.core.errors import Conflict, InvalidRequest, NotFound, ParleyError
from parley.core.identity import Principal
from parley.core.mail import Message
from parley.core.ports import Subscription, Tx
from parley.core.workers import Worker
from parley.service.bridge import commands as bridge_commands
from parley.service.conversations.transcripts import channel_topic
from parley.service.workers.records import WORKERS_TOPIC
from parley.service.workers.views import session_names

if TYPE_CHECKING:
    from parley.service.hub import Hub

log = logging.getLogger("parley.bridge")

RELAY_BATCH = 100
Key = tuple[str, str]  # ("worker" | "summary" | "relay", id)


class AlreadyRelayed(Conflict):
    """This platform message was relayed before."""

    code = "already_relayed"


class Bridge:
    """Mirrors the hub on one chat platform; implements the port's ``Inbound`` side."""

    def __init__(self, hub: Hub, chat: ChatBridge, *, mirror_discussions: bool = True) -> None:
        self.hub = hub
        self.chat = chat
        # Every discussion channel (seed 000) gets a post of its own, as a worker does.
        self.mirror_discussions = mirror_discussions
        self._dirty: dict[Key, None] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._subs: dict[str, Subscription] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.errors: deque[str] = deque(maxlen=100)  # the latest failed syncs, for checks
        # Platform messages handled so far (relayed, refused or found relayed before).
        self.inbound_handled = 0
        self._inbound_done = asyncio.Condition()

    # -- life --------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect, then catch up with everything that changed while no bridge ran."""
        topics = [WORKERS_TOPIC, "hub"] if self.mirror_discussions else [WORKERS_TOPIC]
        workers_sub = self.hub.bus.subscribe(topics)
        self._tasks.append(asyncio.create_task(self._follow(workers_sub, None), name="bridge-w"))
        await self.chat.start(self)
        await self.catch_up()
        self._tasks.append(asyncio.create_task(self._run(), name="bridge-sync"))

    async def catch_up(self) -> None:
        """Mark for a sync every mapped channel (to send what it received), every worker that
        is unfinished or already has a post, and every discussion channel. A worker that
        ended before any bridge saw it gets no post: a first start does not flood the forum
        with the hub's history."""
        async with self.hub.store.read() as tx:
            w = tx.table("workers").c
            places: list[BridgePlace] = await tx.select("bridge_places")
            mapped = {p.id for p in places}
            workers: list[Worker] = await tx.select("workers", order_by=[w.id])
            c = tx.table("channels").c
            discussions: list[Channel] = (
                await tx.select("channels", c.kind == "discussion", c.status != "deleted")
                if self.mirror_discussions
                else []
            )
        for place in places:
            self._watch(place.id)
            self._mark(("relay", place.id))
        for worker in workers:
            if not worker.terminal or worker.channel_id in mapped:
                self._mark(("worker", worker.id))
        for channel in discussions:
            if channel.status == "active" or channel.id in mapped:
                self._mark(("discussion", channel.id))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for sub in self._subs.values():
            await sub.close()
        self._subs.clear()
        await self.chat.close()

    async def settled(self, timeout_s: float = 30.0) -> None:
        """Wait until nothing is left to sync (for tests and ``parley discord check``)."""
        async with asyncio.timeout(timeout_s):
            while self._dirty or not self._idle.is_set():
                self._idle.clear()
                await self._idle.wait()

    def _mark(self, key: Key) -> None:
        self._dirty[key] = None
        self._idle.clear()
        self._wake.set()

    def _watch(self, channel_id: str) -> None:
        if channel_id in self._subs:
            return
        sub = self.hub.bus.subscribe([channel_topic(channel_id)])
        self._subs[channel_id] = sub
        self._tasks.append(asyncio.create_task(self._follow(sub, channel_id)))

    async def _follow(self, sub: Subscription, channel_id: str | None) -> None:
        """Turn bus events into dirty marks; an overflow only means "read the store again"."""
        async for event in sub:
            if event.get("type") == "overflow":
                # Events were dropped: the store still knows; read it all again.
                self._mark(("catch-up", ""))
            if channel_id is not None:
                self._mark(("relay", channel_id))
                continue
            worker = event.get("worker")
            if isinstance(worker, dict):
                self._mark(("worker", str(worker["id"])))
                continue
            discussion = br.discussion_of(event.get("event"))
            if discussion is not None:
                self._mark(("discussion", discussion))

    async def _run(self) -> None:
        while True:
            if not self._dirty:
                self._idle.set()
                await self._wake.wait()
                self._wake.clear()
                continue
            key = next(iter(self._dirty))
            del self._dirty[key]
            try:
                await self._sync(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # One failed sync must not stop the bridge; the next event of the same worker
                # or channel tries again from the store.
                log.exception("bridge sync of %s %s failed", *key)
                self.errors.append(f"{key[0]} {key[1]}: {exc}")

    async def _sync(self, key: Key) -> None:
        kind, ident = key
        if kind == "worker":
            await self.sync_worker(ident)
        elif kind == "summary":
            await self.sync_summary(ident)
        elif kind == "discussion":
            await self.sync_discussion(ident)
        elif kind == "catch-up":
            await self.catch_up()
        else:
            await self.relay_out(ident)

    # -- workers -----------------------------------------------------------------------------------
    @staticmethod
    async def _worker_view(tx: Tx, worker: Worker) -> tuple[str, str, str]:
        """The worker's parent short name, its prompt and purpose."""
        prompt = ""
        if worker.dispatch_message_id:
            dispatch: Message | None = await tx.get("messages", worker.dispatch_message_id)
            prompt = dispatch.body if dispatch else ""
        if not prompt:
            first = await tx.channel_messages(worker.channel_id, limit=1)
            prompt = first[0].content if first else ""
        parent_name = worker.agent_id
        if worker.parent_worker_id:
            parent: Worker | None = await tx.get("workers", worker.parent_worker_id)
            if parent is not None:
                session: LogicalSession | None = await tx.get("sessions", parent.session_id)
                parent_name = session.display_name if session else parent.agent_id
        return br.parent_short(parent_name), prompt, worker.purpose

    async def _place(self, channel_id: str) -> BridgePlace | None:
        async with self.hub.store.read() as tx:
            place: BridgePlace | None = await tx.get("bridge_places", channel_id)
        return place

    async def _save_place(self, place_id: str, **values: Any) -> None:
        async def job(tx: Tx) -> None:
            await tx.update("bridge_places", place_id, **values)

        await self.hub.store.write(job)

    async def sync_worker(self, worker_id: str) -> BridgePlace | None:
        """Make the worker's post match its state: create it with the dispatch summary as its
        first message, or edit its title and archive flag when they changed."""
        # One read for the worker, its view and its place: this runs on every worker event.
        async with self.hub.store.read() as tx:
            worker: Worker | None = await tx.get("workers", worker_id)
            if worker is None:
                return None
            parent, prompt, purpose = await self._worker_view(tx, worker)
            place: BridgePlace | None = await tx.get("bridge_places", worker.channel_id)
        title = br.post_title(worker.state, parent, prompt)
        archived = br.is_archived(worker.state)
        if place is None:
            ref = await self.chat.create_post(title, br.dispatch_summary(parent, prompt, purpose))
            place = BridgePlace(
                id=worker.channel_id,
                kind="worker",
                worker_id=worker.id,
                place_id=ref.place_id,
                title=title,
                created=self.hub.ctx.clock.now(),
            )
            record = place

            async def insert(tx: Tx) -> None:
                tx.insert("bridge_places", record)

            await self.hub.store.write(insert)
            self._watch(worker.channel_id)
            self._mark(("relay", worker.channel_id))
        if place.title != title or place.archived != archived:
            if place.archived and archived:
                # An archived thread takes no other change: unarchive, rename, archive again.
                await self.chat.edit_post(place.place_id, title=title, archived=False)
            await self.chat.edit_post(place.place_id, title=title, archived=archived)
            await self._save_place(place.id, title=title, archived=archived)
            place = place.model_copy(update={"title": title, "archived": archived})
        if worker.parent_worker_id:
            self._mark(("summary", worker.parent_worker_id))
        if worker.children_worker_ids:
            self._mark(("summary", worker.id))
        return place

    async def sync_summary(self, parent_id: str) -> None:
        """The parent's ONE summary message: posted once, then edited when its text changes."""
        async with self.hub.store.read() as tx:
            parent: Worker | None = await tx.get("workers", parent_id)
            if parent is None:
                return
            w = tx.table("workers").c
            children: list[Worker] = await tx.select(
                "workers", w.parent_worker_id == parent_id, order_by=[w.id]
            )
            names = await session_names(
                tx, [parent.session_id, *(child.session_id for child in children)]
            )
            place: BridgePlace | None = await tx.get("bridge_places", parent.channel_id)
        lines = []
        for child in children:
            name = br.last_part(names[child.session_id]) if child.session_id in names else child.id
            note = child.result.summary or (child.result.error or "") if child.result else ""
            lines.append(ChildLine(name=name, state=child.state, note=note))
        place = place or await self.sync_worker(parent_id)
        if place is None or not children:
            return
        text = br.summary_text(names.get(parent.session_id, parent.id), lines)
        if place.summary_message_id is None:
            message_id = await self.chat.send(
                place.place_id, text, nonce=br.nonce_for(f"summary:{parent_id}")
            )
            await self._save_place(place.id, summary_message_id=message_id, summary_text=text)
        elif text != place.summary_text:
            await self.chat.edit_message(place.place_id, place.summary_message_id, text)
            await self._save_place(place.id, summary_text=text)

    async def sync_discussion(self, channel_id: str) -> None:
        """A discussion channel's post: opened with its guide, then its title and archive
        flag follow the channel (closed: 🔒 and archived)."""
        async with self.hub.store.read() as tx:
            channel = await tx.get_channel(channel_id)
        if channel is None or channel.kind != "discussion":
            return
        title = br.discussion_title(channel.name, channel.status)
        archived = channel.status != "active"
        place = await self._place(channel_id)
        if place is None:
            guide = str(channel.metadata.get("discussGuide") or "")
            first = br.cut(f"**Discussion** among {', '.join(channel.members)}\n\n{guide}", 2000)
            place = await self.open_channel_post(channel_id, title, first)
            self._mark(("relay", channel_id))
        if place.title != title or place.archived != archived:
            await self.chat.edit_post(place.place_id, title=title, archived=archived)
            await self._save_place(place.id, title=title, archived=archived)

    # -- relays ------------------------------------------------------------------------------------
    async def relay_out(self, channel_id: str) -> None:
        """Send the channel's messages after the last one relayed. Each send carries the hub
        message's nonce and is recorded with the new position in one commit: a crash between
        the two resends it, and the platform recognises the nonce."""
        place = await self._place(channel_id)
        if place is None:
            return
        async with self.hub.store.read() as tx:
            messages = await tx.channel_messages(
                channel_id, after_seq=place.last_seq, limit=RELAY_BATCH
            )
        for message in messages:
            relay: BridgeRelay | None = None
            if br.should_relay_out(message, worker_post=place.kind == "worker"):
                platform_id = await self.chat.send(
                    place.place_id, br.relay_text(message), nonce=br.nonce_for(message.id)
                )
                relay = BridgeRelay(
                    id=br.relay_key("out", message.id),
                    hub_message_id=message.id,
                    platform_message_id=platform_id,
                    created=self.hub.ctx.clock.now(),
                )
            await self._advance(place.id, message.seq, relay)
        if len(messages) == RELAY_BATCH:
            self._mark(("relay", channel_id))

    async def _advance(self, place_id: str, seq: int, relay: BridgeRelay | None) -> None:
        async def job(tx: Tx) -> None:
            if relay is not None and await tx.get("bridge_relays", relay.id) is None:
                tx.insert("bridge_relays", relay)
            await tx.update("bridge_places", place_id, last_seq=seq)

        await self.hub.store.write(job)

    async def _principal_of(self, user_id: str) -> Principal | None:
        return await self.hub.bridge_links.principal_of(user_id)

    async def _place_by_platform_id(self, platform_place_id: str) -> BridgePlace | None:
        async with self.hub.store.read() as tx:
            p = tx.table("bridge_places").c
            rows: list[BridgePlace] = await tx.select(
                "bridge_places", p.place_id == platform_place_id, limit=1
            )
        return rows[0] if rows else None

    async def on_message(self, message: InboundMessage) -> None:
        """A person's message in a mapped place becomes their post in its hub channel (in a
        child's post: a message to that worker), once, whatever the platform redelivers."""
        try:
            await self._relay_in(message)
        finally:
            async with self._inbound_done:
                self.inbound_handled += 1
                self._inbound_done.notify_all()

    async def inbound_settled(self, count: int, timeout_s: float = 30.0) -> None:
        """Wait until ``count`` platform messages were handled (for tests)."""
        async with asyncio.timeout(timeout_s), self._inbound_done:
            await self._inbound_done.wait_for(lambda: self.inbound_handled >= count)

    async def _relay_in(self, message: InboundMessage) -> None:
        place = await self._place_by_platform_id(message.place_id)
        if place is None or not message.content.strip():
            return
        key = br.relay_key("in", message.message_id)
        async with self.hub.store.read() as tx:
            if await tx.get("bridge_relays", key) is not None:
                return
        who = await self._principal_of(message.user_id)
        if who is None:
            await self.chat.send(
                message.place_id,
                f"{message.user_name or 'This user'} is not linked to a parley identity, so "
                "the message was not passed on. Ask for a code with `parley discord link` and "
                "run /link with it.",
                nonce=br.nonce_for(f"unlinked:{message.message_id}"),
            )
            return

        async def record(tx: Tx, posted: ChannelMessage) -> None:
            if await tx.get("bridge_relays", key) is not None:
                raise AlreadyRelayed(f"platform message {message.message_id} was relayed")
            tx.insert(
                "bridge_relays",
                BridgeRelay(
                    id=key,
                    hub_message_id=posted.id,
                    platform_message_id=message.message_id,
                    created=self.hub.ctx.clock.now(),
                ),
            )

        try:
            await self.hub.channels.post(
                who,
                place.id,
                message.content,
                metadata={"via": "discord", "discord_message_id": message.message_id},
                then=record,
            )
        except AlreadyRelayed:
            return
        except ParleyError as exc:
            await self.chat.send(
                message.place_id,
                f"Not passed on ({exc.code}): {exc.message}",
                nonce=br.nonce_for(f"refused:{message.message_id}"),
            )

    # -- commands ----------------------------------------------------------------------------------
    async def on_command(self, call: CommandCall) -> str:
        """Run a slash command as the caller's linked principal; the reply says what happened
        or why it was refused."""
        if call.name == "link":
            return await self.link(call.user_id, call.options.get("code", ""))
        who = await self._principal_of(call.user_id)
        if who is None:
            return (
                "You are not linked to a parley identity. Ask for a code with "
                "`parley discord link` and run /link with it."
            )
        handler = bridge_commands.COMMANDS[call.name]
        try:
            return await handler(self, who, call)
        except ParleyError as exc:
            return f"Refused ({exc.code}): {exc.message}"

    async def link(self, user_id: str, code: str) -> str:
        """Bind the platform user to the principal whose one-time code they give."""
        linked = await self.hub.bridge_links.redeem(user_id, code)
        if linked is None:
            return (
                "Refused (link_code_invalid): that code is unknown, used or expired; ask for a "
                "new one with `parley discord link`."
            )
        return f"Linked: your commands and messages now act as {linked!r} in the hub."

    async def worker_here(self, place_id: str) -> Worker:
        """The worker whose post the command was run in."""
        place = await self._place_by_platform_id(place_id)
        if place is None or place.worker_id is None:
            raise InvalidRequest(
                "run this in a worker's post: this place is not mapped to a worker",
                code="not_a_worker_post",
            )
        async with self.hub.store.read() as tx:
            worker: Worker | None = await tx.get("workers", place.worker_id)
        if worker is None:
            raise NotFound(f"no worker {place.worker_id!r}", code="worker_not_found")
        return worker

    async def open_channel_post(self, channel_id: str, title: str, first: str) -> BridgePlace:
        """Mirror a hub channel (a discussion) as a post of its own."""
        existing = await self._place(channel_id)
        if existing is not None:
            return existing
        ref = await self.chat.create_post(br.cut(title, br.TITLE_MAX), br.cut(first, 2000))
        place = BridgePlace(
            id=channel_id,
            kind="channel",
            place_id=ref.place_id,
            title=title,
            created=self.hub.ctx.clock.now(),
        )

        async def job(tx: Tx) -> None:
            tx.insert("bridge_places", place)

        await self.hub.store.write(job)
        self._watch(channel_id)
        return place
