"""M7 threads (parent_message_id, correlation_id, related[]) and M8 per-agent summaries."""

from __future__ import annotations

from typing import Any

from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import send


async def test_threads_follow_replies_transactions_and_relations(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    ask = await send(hub, alice.principal, "bob", "task", correlation_id="tx-9")
    clock.advance(1)
    reply = await send(hub, bob.principal, "alice", "report", parent_message_id=ask.id)
    clock.advance(1)
    follow = await send(hub, alice.principal, "bob", "handoff", parent_message_id=reply.id)
    clock.advance(1)
    same_tx = await send(hub, carol.principal, "bob", "notice", correlation_id="tx-9")
    clock.advance(1)
    related = await send(hub, alice.principal, "bob", "info", related=[ask.id])
    unrelated = await send(hub, alice.principal, "bob", "task", correlation_id="tx-other")
    whole = [ask.id, reply.id, follow.id, same_tx.id]

    assert hub.operator_token is not None
    r = await api(hub.operator_token).get(f"/v1/mail/{follow.id}/thread")
    assert r.status_code == 200
    assert [m["id"] for m in r.json()] == whole  # up the reply chain, then the transaction
    r = await api(hub.operator_token).get(f"/v1/mail/{ask.id}/thread")
    assert [m["id"] for m in r.json()] == whole  # down the replies
    r = await api(hub.operator_token).get(f"/v1/mail/{related.id}/thread")
    assert [m["id"] for m in r.json()] == [*whole, related.id]
    # A participant sees only the part of the thread it may read.
    r = await api(alice.token).get(f"/v1/mail/{follow.id}/thread")
    assert [m["id"] for m in r.json()] == [ask.id, reply.id, follow.id]
    r = await api(carol.token).get(f"/v1/mail/{same_tx.id}/thread")
    assert [m["id"] for m in r.json()] == [same_tx.id]
    thread = await hub.mail.thread(bob.principal, unrelated.id)
    assert [m.id for m in thread] == [unrelated.id]


async def test_a_copy_belongs_to_the_thread_of_its_original(
    hub: Hub, make_agent: MakeAgent, operator: Any
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    blocker = await send(hub, alice.principal, "bob", "blocker")
    thread = await hub.mail.thread(operator, blocker.id)
    assert sorted(m.recipient_id for m in thread) == ["bob", "operator"]


async def test_the_summary_counts_what_an_agent_has_to_do(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    oldest = await send(hub, alice.principal, "bob", "task")
    clock.advance(100)
    read = await send(hub, alice.principal, "bob", "task")
    working = await send(hub, alice.principal, "bob", "handoff")
    await send(hub, alice.principal, "bob", "blocker")
    solved = await send(hub, alice.principal, "bob", "blocker")
    await hub.mail.update_status(bob.principal, read.id, "read")
    await hub.mail.update_status(bob.principal, working.id, "in_progress")
    await hub.mail.archive(bob.principal, solved.id, None)
    clock.advance(20)
    b = api(bob.token)
    await b.get("/v1/agents/bob/inbox")  # delivered is still unread
    r = await b.get("/v1/agents/bob/summary")
    assert r.status_code == 200
    assert r.json() == {
        "agent_id": "bob",
        "unread": 2,
        "in_progress": 1,
        "oldest_pending_age_s": 120.0,
        "open_blockers": 1,
        "total_open": 4,
    }
    await hub.mail.update_status(bob.principal, oldest.id, "read")
    r = await b.get("/v1/agents/bob/summary")
    assert (r.json()["unread"], r.json()["oldest_pending_age_s"]) == (1, 20.0)
    # The operator's copies of both blockers stay open until the operator closes them.
    assert hub.operator_token is not None
    r = await api(hub.operator_token).get("/v1/agents/operator/summary")
    assert (r.json()["open_blockers"], r.json()["unread"]) == (2, 2)
    r = await api(alice.token).get("/v1/agents/alice/summary")
    assert r.json() == {
        "agent_id": "alice",
        "unread": 0,
        "in_progress": 0,
        "oldest_pending_age_s": None,
        "open_blockers": 0,
        "total_open": 0,
    }
