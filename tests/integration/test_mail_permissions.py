"""M4 permissions and identity: own inbox only, write-only to others, the operator sees all,
blockers reach the operator; the token, never the body, says who is sending."""

from __future__ import annotations

from typing import Any

import pytest

from parley.core.errors import PermissionDenied
from parley.core.mail import InboxFilter
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import all_messages, send

PUBLIC_PATHS = {"/healthz", "/readyz"}


async def test_reading_another_inbox_is_refused(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    msg = await send(hub, alice.principal, "bob")
    a = api(alice.token)
    for path in ("/v1/agents/bob/inbox", "/v1/agents/bob/summary", "/v1/agents/bob/inbox/stream"):
        r = await a.get(path)
        assert r.status_code == 403, path
        assert r.json()["code"] == "inbox_forbidden"
        assert "'alice'" in r.json()["message"] and "'bob'" in r.json()["message"]
    with pytest.raises(PermissionDenied):
        await hub.mail.inbox(alice.principal, "bob", InboxFilter())
    # Peeking must not have delivered anything.
    [stored] = await all_messages(hub)
    assert stored.id == msg.id and stored.status == "pending"


async def test_reading_another_agents_message_is_refused(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    msg = await send(hub, alice.principal, "bob")
    r = await api(carol.token).get(f"/v1/mail/{msg.id}")
    assert r.status_code == 403
    assert r.json()["code"] == "message_forbidden"
    r = await api(carol.token).get(f"/v1/mail/{msg.id}/thread")
    assert r.status_code == 403
    assert r.json()["code"] == "message_forbidden"
    for token in (alice.token, bob.token):  # sender and recipient may
        assert (await api(token).get(f"/v1/mail/{msg.id}")).status_code == 200


async def test_anyone_may_send_into_any_inbox(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    await make_agent("alice")
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    r = await api(carol.token).post("/v1/mail", json={"to": "bob", "kind": "handoff"})
    assert r.status_code == 201
    inbox = (await api(bob.token).get("/v1/agents/bob/inbox")).json()
    assert [(m["from_id"], m["kind"]) for m in inbox] == [("carol", "handoff")]


async def test_the_operator_reads_every_inbox_and_message(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    msg = await send(hub, alice.principal, "bob", subject="private")
    assert hub.operator_token is not None
    op = api(hub.operator_token)
    r = await op.get("/v1/agents/bob/inbox")
    assert r.status_code == 200
    assert [m["id"] for m in r.json()] == [msg.id]
    assert (await op.get(f"/v1/mail/{msg.id}")).json()["subject"] == "private"
    assert (await op.get("/v1/agents/bob/summary")).json()["unread"] == 1
    # The operator looking is not the owner fetching: the mail stays pending for bob.
    assert (await op.get(f"/v1/mail/{msg.id}")).json()["status"] == "pending"


async def test_a_blocker_is_always_copied_to_the_operator(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    r = await api(alice.token).post(
        "/v1/mail", json={"to": "bob", "kind": "blocker", "subject": "waiting on bob"}
    )
    primary = r.json()
    assert primary["recipient_id"] == "bob"
    assert hub.operator_token is not None
    op_inbox = (await api(hub.operator_token).get("/v1/agents/operator/inbox")).json()
    assert len(op_inbox) == 1
    copy = op_inbox[0]
    assert (copy["kind"], copy["subject"], copy["from_id"]) == (
        "blocker",
        "waiting on bob",
        "alice",
    )
    assert (copy["copy_of"], copy["copy_reason"], copy["to_id"]) == (
        primary["id"],
        "blocker",
        "bob",
    )
    # The operator's copy is its own: bob closing his does not close the operator's.
    await hub.mail.archive(bob.principal, primary["id"], None)
    assert (await api(hub.operator_token).get(f"/v1/mail/{copy['id']}")).json()[
        "status"
    ] == "delivered"
    # A blocker addressed to the operator is not doubled.
    await api(alice.token).post("/v1/mail", json={"to": "operator", "kind": "blocker"})
    op_inbox = (await api(hub.operator_token).get("/v1/agents/operator/inbox")).json()
    assert len(op_inbox) == 2
    # Other kinds are not copied.
    await api(alice.token).post("/v1/mail", json={"to": "bob", "kind": "task"})
    op_inbox = (await api(hub.operator_token).get("/v1/agents/operator/inbox")).json()
    assert len(op_inbox) == 2


@pytest.mark.parametrize(
    "spoof",
    [
        {"from_id": "carol"},
        {"from": "carol"},
        {"from_id": "operator", "from_kind": "system"},
        {"from_id": "system", "from_kind": "system", "recipient_id": "carol"},
    ],
)
async def test_no_one_can_send_as_someone_else(
    spoof: dict[str, str], hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    await make_agent("carol")
    r = await api(alice.token).post("/v1/mail", json={"to": "bob", "kind": "task", **spoof})
    assert r.status_code in (201, 400, 422), r.text
    if r.status_code == 201:
        assert (r.json()["from_id"], r.json()["from_kind"]) == ("alice", "agent")
    stored = await all_messages(hub)
    assert all((m.from_id, m.from_kind) == ("alice", "agent") for m in stored)
    assert all(m.recipient_id == "bob" for m in stored)
    inbox = (await api(bob.token).get("/v1/agents/bob/inbox")).json()
    assert all(m["from_id"] == "alice" for m in inbox)


async def test_a_wrong_or_missing_token_is_unauthenticated(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    await make_agent("bob")
    for client, code in (
        (api("pt_not-a-real-token"), "invalid_token"),
        (api(None), "missing_token"),
    ):
        r = await client.post("/v1/mail", json={"to": "bob", "kind": "task"})
        assert r.status_code == 401
        assert r.json()["code"] == code
        assert r.headers["www-authenticate"].startswith('Bearer realm="parley"')
    assert await all_messages(hub) == []


async def test_every_endpoint_but_health_requires_a_token(api: Any, make_agent: MakeAgent) -> None:
    await make_agent("bob")
    anonymous = api(None)
    wrong = api("pt_wrong")
    openapi = (await anonymous.get("/openapi.json")).json()
    checked = 0
    for path, operations in openapi["paths"].items():
        concrete = path
        for param in ("owner", "agent_id", "principal_id", "message_id"):
            concrete = concrete.replace("{" + param + "}", "bob")
        while "{" in concrete:
            start = concrete.index("{")
            concrete = concrete[:start] + "x" + concrete[concrete.index("}") + 1 :]
        for method in operations:
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for client, code in ((anonymous, "missing_token"), (wrong, "invalid_token")):
                r = await client.request(method.upper(), concrete, json={})
                if path in PUBLIC_PATHS:
                    assert r.status_code == 200, (method, path)
                    continue
                assert r.status_code == 401, (method, path, r.status_code, r.text)
                assert r.json()["code"] == code
                checked += 1
    assert checked >= 2 * 12
