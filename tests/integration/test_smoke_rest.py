from __future__ import annotations

from tests.conftest import MakeAgent


async def test_send_and_read_over_rest(api, hub, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    a = api(alice.token)
    r = await a.post("/v1/mail", json={"to": "bob", "kind": "task", "subject": "s", "body": "b"})
    assert r.status_code == 201, r.text
    assert r.json()["from_id"] == "alice"
    r = await api(bob.token).get("/v1/agents/bob/inbox")
    assert [m["subject"] for m in r.json()] == ["s"]
    r = await a.get("/v1/agents/bob/inbox")
    assert r.status_code == 403
    assert r.json()["code"] == "inbox_forbidden"
