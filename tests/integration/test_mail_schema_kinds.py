"""M1 (the message record) and M2 (kinds), through the service layer and REST."""

from __future__ import annotations

import re
from typing import Any

import pytest

from parley.core.errors import UnknownKind
from parley.core.mail import MAIL_KINDS
from parley.core.mail import Message as MessageModel
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import ALL_KINDS, all_messages, send

ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
M1_FIELDS = {
    "id",
    "created",
    "ttl_seconds",
    "from_kind",
    "from_id",
    "to_kind",
    "to_id",
    "cc",
    "kind",
    "subject",
    "body",
    "payload",
    "parent_message_id",
    "correlation_id",
    "related",
    "labels",
    "status",
    "delivered_at",
    "read_at",
    "consumed_at",
    "closed_at",
    "failure_reason",
    "idempotency_key",
}


async def test_a_sent_message_carries_every_m1_field(api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    await make_agent("carol")
    body = {
        "to": "bob",
        "kind": "task",
        "subject": "Review the design",
        "body": "**Markdown** body",
        "payload": {"files": ["a.py"], "priority": 2},
        "cc": ["carol"],
        "correlation_id": "tx-1",
        "related": ["msg-0"],
        "labels": ["wave:W3", "fix:F-1"],
        "idempotency_key": "k-1",
    }
    r = await api(alice.token).post("/v1/mail", json=body)
    assert r.status_code == 201, r.text
    sent = r.json()
    r = await api(bob.token).get(f"/v1/mail/{sent['id']}")
    assert r.status_code == 200
    got = r.json()
    assert set(got) >= M1_FIELDS
    assert ULID.fullmatch(got["id"])
    assert got["created"].endswith(("+00:00", "Z"))
    assert got["ttl_seconds"] == 86400
    assert (got["from_kind"], got["from_id"]) == ("agent", "alice")
    assert (got["to_kind"], got["to_id"]) == ("agent", "bob")
    assert got["cc"] == ["carol"]
    assert (got["kind"], got["subject"], got["body"]) == ("task", "Review the design", body["body"])
    assert got["payload"] == {"files": ["a.py"], "priority": 2}
    assert got["parent_message_id"] is None
    assert got["correlation_id"] == "tx-1"
    assert got["related"] == ["msg-0"]
    assert got["labels"] == ["wave:W3", "fix:F-1"]
    assert got["status"] == "pending"
    assert got["idempotency_key"] == "k-1"
    for field in ("delivered_at", "read_at", "consumed_at", "closed_at", "failure_reason"):
        assert got[field] is None
    r = await api(alice.token).post(
        "/v1/mail", json={"to": "bob", "kind": "report", "parent_message_id": sent["id"]}
    )
    assert r.json()["parent_message_id"] == sent["id"]


async def test_human_senders_are_recorded_as_human(
    hub: Hub, operator: Any, make_agent: MakeAgent
) -> None:
    await make_agent("bob")
    msg = await send(hub, operator, "bob")
    assert (msg.from_kind, msg.from_id) == ("human", "operator")


def test_parley_knows_exactly_the_thirteen_spec_kinds() -> None:
    assert sorted(MAIL_KINDS) == sorted(ALL_KINDS)
    assert len(ALL_KINDS) == 13


@pytest.mark.parametrize("kind", ALL_KINDS)
async def test_every_kind_is_accepted(kind: str, hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    via_service = await send(hub, alice.principal, "bob", kind)
    r = await api(alice.token).post("/v1/mail", json={"to": "bob", "kind": kind})
    assert r.status_code == 201, r.text
    assert via_service.kind == r.json()["kind"] == kind


@pytest.mark.parametrize("kind", ["gossip", "TASK", "", "task "])
async def test_an_unknown_kind_is_refused(
    kind: str, hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    with pytest.raises(UnknownKind) as info:
        await send(hub, alice.principal, "bob", kind)
    assert info.value.code == "unknown_kind"
    r = await api(alice.token).post("/v1/mail", json={"to": "bob", "kind": kind})
    assert r.status_code == 400
    err = r.json()
    assert err["code"] == "unknown_kind"
    assert repr(kind) in err["message"] and "task" in err["message"]
    assert await all_messages(hub) == []


def test_the_record_model_has_every_m1_field() -> None:
    assert set(MessageModel.model_fields) >= M1_FIELDS


async def test_bad_input_is_refused_not_a_server_error(
    hub: Hub, api: Any, make_agent: MakeAgent, clock: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    r = await api(alice.token).post(
        "/v1/mail", json={"to": "bob", "kind": "task", "parent_message_id": "x" * 65}
    )
    assert (r.status_code, r.json()["code"]) == (422, "validation_error")
    old = await send(hub, alice.principal, "bob", body="old")
    clock.advance(3600)
    new = await send(hub, alice.principal, "bob", body="new")
    b = api(bob.token)
    r = await b.get("/v1/agents/bob/inbox", params={"since": "yesterday"})
    assert (r.status_code, r.json()["code"]) == (400, "invalid_since")
    assert "'yesterday'" in r.json()["message"]
    for since in ("2026-01-01T00:30:00Z", "2026-01-01T00:30", "2026-01-01T01:30:00+01:00"):
        r = await b.get("/v1/agents/bob/inbox", params={"since": since})
        assert [m["id"] for m in r.json()] == [new.id], since
    r = await b.get("/v1/agents/bob/inbox", params={"since": "2025-12-31T23:59:00Z"})
    assert [m["id"] for m in r.json()] == [old.id, new.id]
