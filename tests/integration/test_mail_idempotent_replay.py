"""M6 over REST: a resend with an idempotency key is told apart from a new message: 200 with
``Idempotent-Replayed: true`` and the original, where a first send is 201."""

from __future__ import annotations

from typing import Any

from parley.core.mail import SendRequest
from parley.service.hub import Hub
from tests.conftest import MakeAgent


async def test_a_first_send_is_201_and_a_resend_is_200_replayed(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    body = {"to": "bob", "kind": "task", "body": "once", "idempotency_key": "job-7"}
    first = await api(alice.token).post("/v1/mail", json=body)
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    again = await api(alice.token).post("/v1/mail", json={**body, "body": "twice"})
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    # Without a key every send is new.
    plain = await api(alice.token).post("/v1/mail", json={"to": "bob", "kind": "task"})
    assert plain.status_code == 201
    assert "idempotent-replayed" not in plain.headers


async def test_the_service_says_whether_it_replayed(hub: Hub, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    req = SendRequest(to="bob", kind="task", idempotency_key="k")
    first = await hub.mail.send(alice.principal, req)
    again = await hub.mail.send(alice.principal, req)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.message == first.message


async def test_the_openapi_document_states_both_answers_and_the_header(api: Any) -> None:
    doc = (await api(None).get("/openapi.json")).json()
    responses = doc["paths"]["/v1/mail"]["post"]["responses"]
    assert responses["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Message"
    }
    assert responses["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Message"
    }
    header = responses["200"]["headers"]["Idempotent-Replayed"]
    assert header["schema"] == {"type": "string", "enum": ["true"]}
    assert "original" in responses["200"]["description"]
