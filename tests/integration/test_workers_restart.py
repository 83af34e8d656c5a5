"""A worker after its hub died (W5, W7): a takeover the crash cut is held and re-delivered as a
takeover on the resumed turn, a new takeover is accepted, and the resume names the worker's task.
The rows are written as a hub killed mid-takeover leaves them; a second hub starts on the same
database."""

from __future__ import annotations

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.channels import ChannelMessage, Task
from parley.core.identity import SYSTEM_ID, Principal
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.core.runtime import Turn
from parley.core.workers import Worker
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.service.workers.records import StartSpec
from parley.testing import FakeClock, StaticRuntimes
from tests.integration.discussion_support import messages

DEAD = "a-dead-hub"
TASK = "refactor the parser"
INSTRUCTION = "Keep the old API; only rename the internals."


class Coder:
    """The agent ``coder``: replies ``done`` and keeps each turn's prompt."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    async def reply(self, turn: Turn) -> str:
        self.turns.append(turn)
        return "done"

    def runtimes(self) -> StaticRuntimes:
        runtimes = StaticRuntimes()
        runtimes.set("coder", ScriptedRuntime(self.reply))
        return runtimes


async def first_hub(settings: Settings, clock: FakeClock) -> tuple[Hub, str, Principal, Worker]:
    """A hub with a ``coder`` worker whose first turn (``TASK``) has ended."""
    hub = build_hub(settings, clock=clock, runtimes=Coder().runtimes())
    await hub.start(background=False)
    token = hub.operator_token
    assert token is not None
    operator: Principal = await hub.identity.authenticate(token)
    await hub.identity.create_agent(operator, AgentSpec(id="coder", runtime={"kind": "scripted"}))
    worker = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt=TASK))
    await hub.tasks.wait_idle()
    return hub, token, operator, worker


async def cut_mid_takeover(hub: Hub, operator: Principal, worker: Worker, *, injected: bool) -> str:
    """Leave the rows as a hub killed during a takeover does: the worker running a turn under
    the dead hub, the takeover mail sent and the worker's mark on it. ``injected``: the envelope
    was already posted and its turn is the one cut; else the cut turn is an ordinary one and the
    envelope was never posted. Returns the takeover mail's id."""

    async def job(tx: Tx) -> str:
        mail = await hub.mail.deliver_system(
            tx,
            "coder",
            "takeover",
            f"Takeover by {operator.display_name}",
            INSTRUCTION,
            {"instruction": INSTRUCTION, "interrupt_first": True, "by": operator.id},
            session_id=worker.session_id,
            from_id=operator.id,
        )
        metadata = {"worker_id": worker.id}
        content = "keep going"
        if injected:
            metadata |= {"takeover_message_id": mail.id, "by": operator.id}
            content = f"[TAKEOVER] {operator.display_name} interrupted your turn\n\n{INSTRUCTION}"
            await tx.mark_delivered([mail.id], hub.ctx.clock.now())
        trigger: ChannelMessage = await hub.channels.append(
            tx,
            worker.channel_id,
            sender_id=SYSTEM_ID,
            sender_kind="system",
            content=content,
            trigger=True,
            metadata=metadata,
        )
        task = Task(
            id=new_ulid(),
            channel_id=worker.channel_id,
            trigger_id=trigger.id,
            mode="wake",
            members=["coder"],
            rounds=1,
            owner=DEAD,
            created=hub.ctx.clock.now(),
        )
        tx.insert("tasks", task)
        await tx.update(
            "workers",
            worker.id,
            state="running",
            task_id=task.id,
            owner=DEAD,
            pending_takeover_message_id=mail.id,
        )
        return mail.id

    return await hub.store.write(job)


async def restarted(settings: Settings, clock: FakeClock, coder: Coder, token: str) -> Hub:
    hub = build_hub(settings, clock=clock, runtimes=coder.runtimes())
    await hub.start(background=False)
    return hub


async def event_types(hub: Hub, subject: str) -> list[str]:
    async with hub.store.read() as tx:
        e = tx.table("events").c
        rows = await tx.select("events", e.subject == subject, order_by=[e.id])
    return [r.type for r in rows]


async def test_a_takeover_cut_before_its_envelope_is_redelivered_as_a_takeover_on_resume(
    settings: Settings, clock: FakeClock
) -> None:
    first, token, operator, worker = await first_hub(settings, clock)
    mail_id = await cut_mid_takeover(first, operator, worker, injected=False)
    await first.stop()

    coder = Coder()
    second = await restarted(settings, clock, coder, token)
    try:
        operator = await second.identity.authenticate(token)
        after = await second.workers.get(operator, worker.id)
        assert after.state == "interrupted"
        # Held, not in progress: nothing will consume it until the worker runs again.
        assert after.pending_takeover_message_id is None
        await second.workers.resume(operator, worker.id)
        await second.tasks.wait_idle()
        task = coder.turns[-1].prompt.task
        assert "[TAKEOVER]" in task
        assert "This is a takeover of an interrupted turn, not a new task" in task
        assert INSTRUCTION in task
        assert "<pending_mail>" not in task
        done = await second.workers.get(operator, worker.id)
        assert done.pending_takeover_message_id is None
        assert done.state == "idle"
        mail = await second.mail.get(operator, mail_id)
        assert mail.consumed_at is not None
        types = await event_types(second, f"worker:{worker.id}")
        assert "system.takeover_held" in types
        assert "system.takeover_consumed" in types
        # A new takeover is accepted, and its own turn consumes it.
        outcome = await second.workers.takeover(operator, worker.id, "now add tests")
        await second.tasks.wait_idle()
        assert "now add tests" in coder.turns[-1].prompt.task
        final = await second.workers.get(operator, worker.id)
        assert final.pending_takeover_message_id is None
        assert (await second.mail.get(operator, outcome.message_id)).consumed_at is not None
    finally:
        await second.stop()


async def test_a_takeover_whose_turn_was_cut_is_redelivered_on_resume(
    settings: Settings, clock: FakeClock
) -> None:
    first, token, operator, worker = await first_hub(settings, clock)
    mail_id = await cut_mid_takeover(first, operator, worker, injected=True)
    await first.stop()

    coder = Coder()
    second = await restarted(settings, clock, coder, token)
    try:
        operator = await second.identity.authenticate(token)
        after = await second.workers.get(operator, worker.id)
        assert after.state == "interrupted"
        assert after.pending_takeover_message_id is None
        # The cut turn did not consume it: it ran no further than the crash.
        assert (await second.mail.get(operator, mail_id)).consumed_at is None
        await second.workers.resume(operator, worker.id)
        await second.tasks.wait_idle()
        task = coder.turns[-1].prompt.task
        assert "[TAKEOVER]" in task and INSTRUCTION in task
        assert (await second.mail.get(operator, mail_id)).consumed_at is not None
    finally:
        await second.stop()


async def test_a_new_takeover_after_the_crash_is_accepted_and_replaces_the_held_one(
    settings: Settings, clock: FakeClock
) -> None:
    first, token, operator, worker = await first_hub(settings, clock)
    held = await cut_mid_takeover(first, operator, worker, injected=False)
    await first.stop()

    coder = Coder()
    second = await restarted(settings, clock, coder, token)
    try:
        operator = await second.identity.authenticate(token)
        outcome = await second.workers.takeover(operator, worker.id, "stop and summarise")
        await second.tasks.wait_idle()
        task = coder.turns[-1].prompt.task
        assert "[TAKEOVER]" in task and "stop and summarise" in task
        # The held instruction is not slipped in as information.
        assert "<pending_mail>" not in task
        after = await second.workers.get(operator, worker.id)
        assert after.pending_takeover_message_id is None and after.state == "idle"
        assert (await second.mail.get(operator, outcome.message_id)).consumed_at is not None
        assert (await second.mail.get(operator, held)).consumed_at is not None
        # A resume now carries no takeover: the held one was replaced.
        await second.workers.resume(operator, worker.id)
        await second.tasks.wait_idle()
        assert "[TAKEOVER]" not in coder.turns[-1].prompt.task
    finally:
        await second.stop()


async def test_the_resume_after_a_crash_names_the_workers_task_and_the_note_speaks_of_work(
    settings: Settings, clock: FakeClock
) -> None:
    first, token, operator, worker = await first_hub(settings, clock)

    async def cut(tx: Tx) -> None:
        trigger: ChannelMessage = await first.channels.append(
            tx,
            worker.channel_id,
            sender_id=operator.id,
            sender_kind="human",
            content=TASK + ", step two",
            trigger=True,
        )
        task = Task(
            id=new_ulid(),
            channel_id=worker.channel_id,
            trigger_id=trigger.id,
            mode="wake",
            members=["coder"],
            rounds=1,
            owner=DEAD,
            created=first.ctx.clock.now(),
        )
        tx.insert("tasks", task)
        await tx.update("workers", worker.id, state="running", task_id=task.id, owner=DEAD)

    await first.store.write(cut)
    await first.stop()

    coder = Coder()
    second = await restarted(settings, clock, coder, token)
    try:
        operator = await second.identity.authenticate(token)
        notes = [
            m.content
            for m in await messages(second, worker.channel_id)
            if m.sender_kind == "system"
        ][-1:]
        assert notes and "discussion" not in notes[0].lower()
        assert notes[0].startswith("[Turn Interrupted]")
        await second.workers.resume(operator, worker.id)
        await second.tasks.wait_idle()
        task = coder.turns[-1].prompt.task
        assert task.startswith("[RESUME] Your work on:")
        assert "Interrupted]" not in task.splitlines()[0]
        assert TASK + ", step two" in task.splitlines()[0]
    finally:
        await second.stop()


async def test_a_held_takeover_outlives_its_mails_ttl_and_is_redelivered_on_resume(
    settings: Settings, clock: FakeClock
) -> None:
    first, token, operator, worker = await first_hub(settings, clock)
    mail_id = await cut_mid_takeover(first, operator, worker, injected=False)
    await first.stop()

    coder = Coder()
    second = await restarted(settings, clock, coder, token)
    try:
        operator = await second.identity.authenticate(token)
        # The worker is resumed two days later: the takeover mail's TTL has passed meanwhile.
        clock.advance(2 * 86400)
        expired = await second.mail.expire_due()
        assert mail_id in [m.id for m in expired]
        await second.workers.resume(operator, worker.id)
        await second.tasks.wait_idle()
        task = coder.turns[-1].prompt.task
        assert "[TAKEOVER]" in task and INSTRUCTION in task
        assert (await second.mail.get(operator, mail_id)).consumed_at is not None
        assert (await second.workers.get(operator, worker.id)).pending_takeover_message_id is None
    finally:
        await second.stop()
