"""Workers on both backends (W1–W8, M5): spawn and results, cancel trees, takeover of a turn in
flight, health, session mail, recovery, permissions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import Principal
from parley.core.mail import InboxFilter, SendRequest
from parley.core.runtime import Turn
from parley.core.workers import IllegalWorkerTransition, Worker
from parley.service.hub import Hub
from parley.service.workers.records import ResultSpec, SpawnSpec, StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent


@dataclass
class Script:
    """An agent whose turns are recorded. The first turn whose task names a key of ``gates``
    announces that it started and waits for that gate (or for the runtime to stop it)."""

    name: str
    replies: Callable[[Turn], str] = lambda turn: "done"
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    async def reply(self, turn: Turn) -> str:
        self.turns.append(turn)
        text = turn.prompt.task
        for key, gate in list(self.gates.items()):
            if key in text and not self.started[key].is_set():
                self.started.setdefault(key, asyncio.Event()).set()
                try:
                    await gate.wait()
                except asyncio.CancelledError:
                    # The runtime's race stopped this call: the turn was really stopped.
                    self.cancelled.append(key)
                    raise
        return self.replies(turn)

    def gate(self, key: str) -> asyncio.Event:
        self.started.setdefault(key, asyncio.Event())
        return self.gates.setdefault(key, asyncio.Event())


async def scripted(make_agent: MakeAgent, runtimes: StaticRuntimes, name: str) -> Script:
    await make_agent(name, runtime={"kind": "scripted"})
    script = Script(name)
    runtimes.set(name, ScriptedRuntime(script.reply))
    return script


async def events_of(hub: Hub, subject: str) -> list[str]:
    async with hub.store.read() as tx:
        e = tx.table("events").c
        rows = await tx.select("events", e.subject == subject, order_by=[e.id])
    return [r.type for r in rows]


async def test_spawn_runs_the_child_and_its_result_unblocks_the_parent(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    helper = await scripted(make_agent, runtimes, "helper")
    helper.replies = lambda turn: "found 3 flaky tests in the parser"
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="Audit the tests"))
    await hub.tasks.wait_idle()
    assert (await hub.workers.get(operator, root.id)).state == "idle"

    child = await hub.workers.spawn(
        operator,
        root.id,
        SpawnSpec(
            prompt="Find the flaky tests in the parser", agent_id="helper", block_parent=True
        ),
    )
    assert child.parent_worker_id == root.id
    assert child.trace_id == root.trace_id
    assert child.state == "running"
    async with hub.store.read() as tx:
        session = await tx.get("sessions", child.session_id)
        parent_view = await tx.get("workers", root.id)
    assert session.parent_logical_id == root.session_id
    assert session.spawned_by_worker_id == root.id
    assert session.display_name.startswith("lead / audit")
    assert session.display_name == "lead / audit-the-tests / find-the-flaky"
    assert len(session.display_name) <= 40
    assert parent_view.children_worker_ids == [child.id]
    assert parent_view.blocked_on_message_id == child.dispatch_message_id

    await hub.tasks.wait_idle()
    done = await hub.workers.get(operator, child.id)
    assert done.state == "completed"
    assert done.result is not None and done.result.success
    assert done.result.summary == "found 3 flaky tests in the parser"
    # The task-result reached the parent's session and woke the parent in its channel.
    inbox = await hub.mail.inbox(operator, "lead", InboxFilter(kind="task-result"))
    assert [m.to_id for m in inbox] == [root.session_id]
    assert inbox[0].payload["worker_id"] == child.id
    assert inbox[0].correlation_id == child.dispatch_message_id
    parent = await hub.workers.get(operator, root.id)
    assert parent.blocked_on_message_id is None
    assert any("[TASK RESULT]" in t.prompt.render() for t in lead.turns)
    # The child was dispatched a task-dispatch mail and its turn read the prompt.
    dispatch = await hub.mail.get(operator, child.dispatch_message_id)
    assert dispatch.kind == "task-dispatch" and dispatch.to_id == child.session_id
    assert "Find the flaky tests in the parser" in helper.turns[0].prompt.render()
    assert await events_of(hub, f"worker:{child.id}") == [
        "worker.created",
        "worker.running",
        "worker.completed",
        "worker.result",
    ]


async def test_a_summary_over_the_budget_becomes_an_artifact(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await scripted(make_agent, runtimes, "lead")
    hub.settings.worker_result_budget_tokens = 10
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="plan"))
    await hub.tasks.wait_idle()
    long = "x" * 200
    child_script = await scripted(make_agent, runtimes, "writer")
    child_script.replies = lambda turn: long
    # The operator may hand the work to another agent.
    child = await hub.workers.spawn(
        operator, root.id, SpawnSpec(prompt="write it all", agent_id="writer")
    )
    await hub.tasks.wait_idle()
    done = await hub.workers.get(operator, child.id)
    assert done.result is not None
    assert done.result.summary == ""
    assert done.result.artifact_id is not None
    assert done.result.summary_tokens == 50
    art = await hub.workers.artifact(operator, done.result.artifact_id)
    assert art.content == long
    inbox = await hub.mail.inbox(operator, "lead", InboxFilter(kind="task-result"))
    assert done.result.artifact_id in inbox[0].body
    assert long not in inbox[0].body


async def test_cancel_stops_a_three_level_tree_but_not_independent_children(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    for key in ("level one", "level two", "level three", "on its own"):
        lead.gate(key)
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="start"))
    await hub.tasks.wait_idle()
    # Without inherited context, so that each turn's text names its own gate only.
    one = await hub.workers.spawn(
        operator, root.id, SpawnSpec(prompt="level one", inherit_context=False)
    )
    two = await hub.workers.spawn(
        operator, one.id, SpawnSpec(prompt="level two", inherit_context=False)
    )
    three = await hub.workers.spawn(
        operator, two.id, SpawnSpec(prompt="level three", inherit_context=False)
    )
    alone = await hub.workers.spawn(
        operator, one.id, SpawnSpec(prompt="on its own", independent=True, inherit_context=False)
    )
    for key in ("level one", "level two", "level three", "on its own"):
        await lead.started[key].wait()

    cancelled = await hub.workers.cancel(operator, one.id, reason="wrong approach")
    assert [w.id for w in cancelled] == [one.id, two.id, three.id]
    assert [w.cancel_propagated_from for w in cancelled] == [None, one.id, two.id]
    assert all(w.state == "killed" for w in cancelled)
    # Their turns really stopped: each runtime call saw its cancel signal.
    assert sorted(lead.cancelled) == ["level one", "level three", "level two"]
    assert (await hub.workers.get(operator, alone.id)).state == "running"
    assert (await hub.workers.get(operator, root.id)).state == "idle"
    # The parent of the cancelled subtree learns its child will not report.
    results = await hub.mail.inbox(operator, "lead", InboxFilter(kind="task-result"))
    assert [m.payload["worker_id"] for m in results] == [one.id]
    assert results[0].payload["success"] is False
    lead.gates["on its own"].set()
    await hub.tasks.wait_idle()
    assert (await hub.workers.get(operator, alone.id)).state == "completed"
    with pytest.raises(Conflict) as err:
        await hub.workers.cancel(operator, one.id)
    assert err.value.code == "worker_finished"


async def test_takeover_interrupts_the_turn_and_injects_the_envelope(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    coder = await scripted(make_agent, runtimes, "coder")
    gate = coder.gate("refactor the parser")
    root = await hub.workers.start(
        operator, StartSpec(agent_id="coder", prompt="refactor the parser")
    )
    await coder.started["refactor the parser"].wait()
    outcome = await hub.workers.takeover(
        operator, root.id, "Keep the old API; only rename the internals.", timeout_s=30
    )
    assert outcome.interrupted and not outcome.timed_out
    assert coder.cancelled == ["refactor the parser"]
    assert outcome.worker.pending_takeover_message_id == outcome.message_id
    await hub.tasks.wait_idle()
    assert not gate.is_set()
    envelope = coder.turns[-1].prompt.render()
    assert "[TAKEOVER]" in envelope
    assert "This is a takeover of an interrupted turn, not a new task" in envelope
    assert "Keep the old API; only rename the internals." in envelope
    assert "refactor the parser" in envelope
    after = await hub.workers.get(operator, root.id)
    assert after.pending_takeover_message_id is None
    assert after.state == "idle"
    types = await events_of(hub, f"worker:{root.id}")
    assert types.index("system.takeover_initiated") < types.index("worker.interrupted")
    assert types.index("worker.interrupted") < types.index("system.takeover_consumed")
    mail = await hub.mail.get(operator, outcome.message_id)
    assert mail.kind == "takeover" and mail.consumed_at is not None


async def test_only_the_operator_and_the_parent_may_cancel_or_take_over(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    await scripted(make_agent, runtimes, "lead")
    await scripted(make_agent, runtimes, "helper")
    other = await make_agent("other", runtime={"kind": "scripted"})
    lead_principal = await hub.identity.require("lead")
    helper = await hub.identity.require("helper")
    root = await hub.workers.start(lead_principal, StartSpec(prompt="work"))
    await hub.tasks.wait_idle()
    child = await hub.workers.spawn(lead_principal, root.id, SpawnSpec(prompt="sub task"))
    await hub.tasks.wait_idle()
    helped = await hub.workers.spawn(operator, root.id, SpawnSpec(prompt="x", agent_id="helper"))
    await hub.tasks.wait_idle()
    # Nobody else even sees them: acting on one is refused as reading it is, as missing.
    for worker_id, action in (
        (child.id, hub.workers.get(other.principal, child.id)),
        (root.id, hub.workers.cancel(other.principal, root.id)),
        (root.id, hub.workers.takeover(other.principal, root.id, "stop")),
        (root.id, hub.workers.spawn(other.principal, root.id, SpawnSpec(prompt="mine now"))),
        (root.id, hub.workers.resume(other.principal, root.id)),
        (root.id, hub.workers.release(other.principal, root.id)),
        (root.id, hub.workers.heartbeat(other.principal, root.id)),
        (child.id, hub.workers.report_result(other.principal, child.id, ResultSpec(summary="x"))),
    ):
        with pytest.raises(NotFound) as missing:
            await action
        assert (missing.value.code, missing.value.message) == (
            "worker_not_found",
            f"no worker {worker_id!r}",
        )
    # A worker's own agent sees it but does not control it; whoever is above it sees it but
    # does not speak for it.
    for action in (
        hub.workers.cancel(helper, helped.id),
        hub.workers.takeover(helper, helped.id, "stop"),
        hub.workers.heartbeat(lead_principal, helped.id),
    ):
        with pytest.raises(PermissionDenied) as err:
            await action
        assert err.value.code == "worker_forbidden"
    # An illegal transition is refused with its own code.
    with pytest.raises(IllegalWorkerTransition):
        await hub.workers.release(lead_principal, child.id)


async def test_a_silent_worker_goes_stale_unless_a_takeover_is_pending_or_long_running(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes, clock
) -> None:
    await scripted(make_agent, runtimes, "a")
    await scripted(make_agent, runtimes, "b")
    quiet = await hub.workers.start(operator, StartSpec(agent_id="a", prompt="x"))
    marked = await hub.workers.start(
        operator, StartSpec(agent_id="b", prompt="y", long_running=True)
    )
    await hub.tasks.wait_idle()
    clock.advance(hub.settings.worker_stale_after_s - 1)
    assert await hub.workers.sweep_stale() == []
    clock.advance(2)
    stale = await hub.workers.sweep_stale()
    assert [w.id for w in stale] == [quiet.id]
    assert (await hub.workers.get(operator, marked.id)).state == "idle"
    # A heartbeat brings it back.
    a = await hub.identity.require("a")
    back = await hub.workers.heartbeat(a, quiet.id)
    assert back.state == "running"


async def test_session_mail_is_injected_before_the_next_turn_and_marked_delivered(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    coder = await scripted(make_agent, runtimes, "coder")
    coder.gate("first task")
    root = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="first task"))
    await coder.started["first task"].wait()
    sent = await hub.mail.send(
        operator,
        SendRequest(
            to=f"session:{root.session_id}",
            kind="context-inject",
            subject="new constraint",
            body="Python 3.11 only",
        ),
    )
    # Busy: the mail waits for the worker's next turn.
    assert (await hub.mail.get(operator, sent.message.id)).status == "pending"
    await hub.workers.takeover(operator, root.id, "wrap up", timeout_s=30)
    await hub.tasks.wait_idle()
    text = coder.turns[-1].prompt.render()
    assert "<pending_mail>" in text and "Python 3.11 only" in text
    assert text.index("<pending_mail>") < text.index("[TAKEOVER]")
    assert (await hub.mail.get(operator, sent.message.id)).status == "delivered"


async def test_report_result_finishes_a_child_through_a_tool(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead = await scripted(make_agent, runtimes, "lead")
    lead.gate("long job")
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="go"))
    await hub.tasks.wait_idle()
    child = await hub.workers.spawn(operator, root.id, SpawnSpec(prompt="long job"))
    await lead.started["long job"].wait()
    me = await hub.identity.require("lead")
    done = await hub.workers.report_result(
        me, child.id, ResultSpec(summary="partial", artifacts=["out.txt"], success=True)
    )
    assert done.state == "completed"
    await hub.tasks.wait_idle()
    assert lead.cancelled == ["long job"]
    assert (await hub.workers.get(operator, child.id)).result.artifacts == ["out.txt"]  # type: ignore[union-attr]


async def independent_child_of_a_cancelled_root(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> tuple[Script, Worker, Worker]:
    """A root worker cancelled while its independent child is in its first turn (held until
    ``lead.gates["independent work"]`` is set): the lead, the root, the child."""
    lead = await scripted(make_agent, runtimes, "lead")
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="go"))
    await hub.tasks.wait_idle()
    lead.gate("independent work")
    child = await hub.workers.spawn(
        operator, root.id, SpawnSpec(prompt="independent work", independent=True)
    )
    await lead.started["independent work"].wait()
    await hub.workers.cancel(operator, root.id)
    return lead, root, child


async def test_recovery_interrupts_running_workers_and_flags_orphans(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead, root, orphan = await independent_child_of_a_cancelled_root(
        hub, operator, make_agent, runtimes
    )
    lead.gates["independent work"].set()
    await hub.tasks.wait_idle()

    # What a hub that died mid-turn leaves behind: the row still says running, under an owner
    # that is no longer alive.
    async def left_running(tx):  # type: ignore[no-untyped-def]
        await tx.update("workers", orphan.id, state="running", owner="a-hub-that-died")

    await hub.store.write(left_running)
    changed = await hub.workers.recover()
    assert [w.id for w in changed] == [orphan.id]
    after = await hub.workers.get(operator, orphan.id)
    assert after.state == "interrupted"
    assert after.cancel_propagated_from == root.id
    types = await events_of(hub, f"worker:{orphan.id}")
    assert types[-2:] == ["worker.interrupted", "worker.orphaned"]


async def test_the_lease_sweep_leaves_an_independent_child_of_a_cancelled_parent_running(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead, _root, child = await independent_child_of_a_cancelled_root(
        hub, operator, make_agent, runtimes
    )
    # Every hub sweeps every few seconds while it runs (P2): the child's parent is gone, but the
    # child was spawned to outlive it (W4), and its hub is alive.
    await hub.sweep_leases()
    assert (await hub.workers.get(operator, child.id)).state == "running"
    lead.gates["independent work"].set()
    await hub.tasks.wait_idle()
    assert (await hub.workers.get(operator, child.id)).state == "completed"


async def test_a_person_posting_to_a_worker_starts_a_turn_that_reads_its_session_mail(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    coder = await scripted(make_agent, runtimes, "coder")
    root = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="first"))
    await hub.tasks.wait_idle()
    await hub.mail.send(
        operator,
        SendRequest(to=f"session:{root.session_id}", kind="info", subject="fyi", body="use uv"),
    )
    posted = await hub.channels.post(operator, root.channel_id, "how is it going?")
    assert posted.task_id is not None
    await hub.tasks.wait_idle()
    window = [e.content for e in coder.turns[-1].prompt.transcript]
    assert window[-2] == "how is it going?"
    assert "<pending_mail>" in window[-1] and "use uv" in window[-1]
    assert (await hub.workers.get(operator, root.id)).state == "idle"


async def test_a_takeover_without_interrupt_waits_for_the_turn_and_is_consumed_by_its_own(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    coder = await scripted(make_agent, runtimes, "coder")
    gate = coder.gate("write the docs")
    root = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="write the docs"))
    await coder.started["write the docs"].wait()
    watch = hub.bus.subscribe([f"worker:{root.id}"])
    takeover = asyncio.ensure_future(
        hub.workers.takeover(
            operator, root.id, "then add examples", interrupt_first=False, timeout_s=60
        )
    )
    # The takeover is on record before the running turn is let go.
    while not (await watch.get())["worker"]["pending_takeover_message_id"]:
        pass
    await watch.close()
    gate.set()
    outcome = await takeover
    assert not outcome.interrupted and not outcome.timed_out
    assert coder.cancelled == []
    await hub.tasks.wait_idle()
    # The turn that was let finish did not consume the takeover; the envelope's turn did.
    async with hub.store.read() as tx:
        e = tx.table("events").c
        consumed = await tx.select(
            "events", e.type == "system.takeover_consumed", e.subject == f"worker:{root.id}"
        )
    assert [c.payload["task_id"] for c in consumed] == [outcome.task_id]
    assert "then add examples" in coder.turns[-1].prompt.render()


async def test_a_worker_made_from_a_work_channel_turn_goes_idle_when_that_turn_ends(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    lead = await make_agent("lead", runtime={"kind": "scripted"})
    spawned: list[str] = []

    async def reply(turn: Turn) -> str:
        if not spawned:
            # What a tool call from inside this turn does: the caller's own worker is made.
            child = await hub.workers.spawn(lead.principal, None, SpawnSpec(prompt="side job"))
            spawned.append(child.id)
        return "spawned"

    runtimes.set("lead", ScriptedRuntime(reply))
    await hub.channels.post(operator, lead.principal.work_channel_id, "split the work")
    await hub.tasks.wait_idle()
    child = await hub.workers.get(operator, spawned[0])
    main = await hub.workers.get(operator, child.parent_worker_id)
    assert main.channel_id == lead.principal.work_channel_id
    assert main.purpose == "main"
    assert main.state == "idle"


async def test_an_agent_lists_the_workers_at_and_below_its_own_and_no_others(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    for name in ("lead", "helper", "other"):
        await scripted(make_agent, runtimes, name)
    lead, helper, other = [await hub.identity.require(n) for n in ("lead", "helper", "other")]
    root = await hub.workers.start(operator, StartSpec(agent_id="lead", prompt="plan"))
    await hub.tasks.wait_idle()
    child = await hub.workers.spawn(
        operator, root.id, SpawnSpec(prompt="fix it", agent_id="helper", block_parent=True)
    )
    grandchild = await hub.workers.spawn(operator, child.id, SpawnSpec(prompt="dig"))
    sibling = await hub.workers.spawn(operator, root.id, SpawnSpec(prompt="x", agent_id="other"))
    elsewhere = await hub.workers.start(operator, StartSpec(agent_id="other", prompt="alone"))
    await hub.tasks.wait_idle()

    async def listed(who: Principal, *states: str, limit: int = 200) -> list[str]:
        return [w.id for w in await hub.workers.listing(who, state=states, limit=limit)]

    assert await listed(lead) == [sibling.id, grandchild.id, child.id, root.id]
    assert await listed(lead, limit=2) == [sibling.id, grandchild.id]
    # The agent of a child sees its subtree, not its parent or its siblings.
    assert await listed(helper) == [grandchild.id, child.id]
    assert await listed(helper, "completed") == [grandchild.id, child.id]
    assert await listed(helper, "idle") == []
    assert await listed(other) == [elsewhere.id, sibling.id]
    assert len(await listed(operator)) == 5
    with pytest.raises(InvalidRequest) as err:
        await hub.workers.listing(lead, state=["asleep"])
    assert err.value.code == "validation_error"
    # The same rule for a session's topology: who is above a worker may read its session,
    # but a runtime's session state is its agent's business, on every surface.
    view = await hub.workers.topology(lead, grandchild.session_id)
    assert [w["id"] for w in view["workers"]] == [grandchild.id]
    assert view["session"]["runtime_state"] is None
    for owner in (helper, operator):
        view = await hub.workers.topology(owner, grandchild.session_id)
        assert view["session"]["runtime_state"] == {}
    with pytest.raises(NotFound):
        await hub.workers.topology(helper, root.session_id)


async def test_a_heartbeat_for_all_of_an_agents_workers_is_one_commit(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes, clock
) -> None:
    await scripted(make_agent, runtimes, "a")
    agent = await hub.identity.require("a")
    first = await hub.workers.start(operator, StartSpec(agent_id="a", prompt="one"))
    second = await hub.workers.start(operator, StartSpec(agent_id="a", prompt="two"))
    ended = await hub.workers.start(operator, StartSpec(agent_id="a", prompt="three"))
    await hub.tasks.wait_idle()
    await hub.workers.release(operator, ended.id)
    clock.advance(hub.settings.worker_stale_after_s + 1)
    assert {w.id for w in await hub.workers.sweep_stale()} == {first.id, second.id}
    beaten = await hub.workers.heartbeat_all(agent, long_running=True)
    assert [(w.id, w.state, w.long_running) for w in beaten] == [
        (second.id, "running", True),
        (first.id, "running", True),
    ]
    assert await hub.workers.heartbeat_all(operator) == []


async def test_a_takeover_whose_turn_a_newer_post_supersedes_is_consumed_not_left_pending(
    hub: Hub, operator, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    coder = await scripted(make_agent, runtimes, "coder")
    coder.gate("port the CLI")
    envelope_gate = coder.gate("use Typer")
    root = await hub.workers.start(operator, StartSpec(agent_id="coder", prompt="port the CLI"))
    await coder.started["port the CLI"].wait()
    outcome = await hub.workers.takeover(operator, root.id, "use Typer", timeout_s=30)
    await coder.started["use Typer"].wait()
    # A person posts while the envelope's turn runs: the newer post supersedes that turn, and
    # the turn it starts reads the envelope in its transcript.
    await hub.channels.post(operator, root.channel_id, "and keep --json everywhere")
    envelope_gate.set()
    await hub.tasks.wait_idle()
    after = await hub.workers.get(operator, root.id)
    assert after.pending_takeover_message_id is None
    assert after.state == "idle"
    assert any("use Typer" in e.content for e in coder.turns[-1].prompt.transcript)
    mail = await hub.mail.get(operator, outcome.message_id)
    assert mail.consumed_at is not None
    # The worker is not wedged: another takeover is accepted.
    again = await hub.workers.takeover(operator, root.id, "ship it", timeout_s=30)
    await hub.tasks.wait_idle()
    assert (await hub.workers.get(operator, root.id)).pending_takeover_message_id is None
    assert again.message_id != outcome.message_id
