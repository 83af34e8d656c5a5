"""An agent joins a channel only with its consent (C1, C3, C14): a member of a group or discussion
is given turns, and a turn runs the agent's runtime, which may be a paid model. The operator and
the agent itself may add it; anyone else needs its allow-list or an invitation it accepts. The
agents here keep the secure default: they consent to nobody."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.core.runtime import Turn
from parley.service.conversations.channels import ChannelPatch, ChannelSpec
from parley.service.hub import Hub
from parley.surfaces.mcp import build_mcp
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.mcp_support import data, refusal


def _creations(workspace_channel: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every way to create a channel with members: (method, path, body)."""
    return [
        ("POST", "/v1/channels", {"name": "g", "members": ["bob"]}),
        ("POST", "/v1/channels", {"name": "d", "kind": "direct", "members": ["bob"]}),
        ("POST", "/v1/im/sessions", {"name": "g", "kind": "group", "members": ["bob"]}),
        ("POST", "/v1/channels/private", {"name": "p", "members": ["bob"]}),
        (
            "POST",
            "/v1/channels/private",
            {
                "name": "disc",
                "members": ["bob"],
                "callbackChannelId": workspace_channel,
                "discussGuide": "decide",
            },
        ),
    ]


async def _bob_channels(hub: Hub, bob: Principal) -> list[str]:
    return [c.kind for c in await hub.channels.visible(bob)]


async def test_an_agent_cannot_put_another_in_a_channel_without_its_consent(
    hub: Hub, api: Any, make_agent: MakeAgent, runtimes: StaticRuntimes, tmp_path: Path
) -> None:
    (tmp_path / "alice").mkdir()
    alice = await make_agent("alice", workspace=str(tmp_path / "alice"))
    bob = await make_agent("bob", runtime={"kind": "scripted"})
    calls: list[str] = []

    def paid_turn(turn: Turn) -> str:
        calls.append(turn.channel_id)
        return "this reply cost bob's owner money"

    runtimes.set("bob", ScriptedRuntime(paid_turn))
    client = api(alice.token)
    for method, path, body in _creations(alice.principal.work_channel_id or ""):
        r = await client.request(method, path, json=body)
        assert r.status_code == 403, (path, body, r.text)
        refused = r.json()
        assert refused["code"] == "membership_consent_required", refused
        assert refused["details"]["agents"] == ["bob"]
        assert "invite" in refused["message"]
    # Nothing was created, and bob's runtime never ran.
    assert await _bob_channels(hub, bob.principal) == ["work"]
    await hub.tasks.wait_idle()
    assert calls == []

    # Nor can a channel's creator add it afterwards.
    alone = (await client.post("/v1/channels", json={"name": "solo"})).json()
    r = await client.patch(f"/v1/channels/{alone['id']}", json={"members": ["bob"]})
    assert (r.status_code, r.json()["code"]) == (403, "membership_consent_required")
    posted = await client.post(f"/v1/channels/{alone['id']}/messages", json={"content": "go"})
    assert posted.status_code == 201
    await hub.tasks.wait_idle()
    assert calls == []
    assert await _bob_channels(hub, bob.principal) == ["work"]


async def test_the_operator_and_the_agent_itself_need_no_consent(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    made = await api(hub.operator_token).post(
        "/v1/channels", json={"name": "ops", "members": ["alice", "bob"]}
    )
    assert made.status_code == 201, made.text
    r = await api(alice.token).post("/v1/channels", json={"name": "mine", "members": ["alice"]})
    assert r.status_code == 201, r.text
    # Humans have no runtime to spend: they need no consent.
    await api(hub.operator_token).post("/v1/humans", json={"id": "hugo"})
    r = await api(alice.token).post("/v1/channels", json={"name": "h", "members": ["hugo"]})
    assert r.status_code == 201, r.text


async def test_an_allow_list_gives_consent(hub: Hub, api: Any, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    op = api(hub.operator_token)
    assert (await op.get("/v1/agents/bob/consent")).json() == {
        "agent_id": "bob",
        "accepts_channels_from": [],
    }
    r = await op.put("/v1/agents/bob/consent", json={"accepts_channels_from": ["alice"]})
    assert r.json()["accepts_channels_from"] == ["alice"]
    r = await api(alice.token).post("/v1/channels", json={"name": "g", "members": ["bob"]})
    assert r.status_code == 201, r.text
    r = await api(carol.token).post("/v1/channels", json={"name": "g", "members": ["bob"]})
    assert r.json()["code"] == "membership_consent_required"

    # The agent changes its own allow-list; others may neither change nor read it.
    r = await api(bob.token).put("/v1/agents/bob/consent", json={"accepts_channels_from": ["*"]})
    assert r.json()["accepts_channels_from"] == ["*"]
    r = await api(carol.token).post("/v1/channels", json={"name": "g2", "members": ["bob"]})
    assert r.status_code == 201, r.text
    for call in (
        api(carol.token).put("/v1/agents/bob/consent", json={"accepts_channels_from": ["carol"]}),
        api(carol.token).get("/v1/agents/bob/consent"),
    ):
        r = await call
        assert (r.status_code, r.json()["code"]) == (403, "consent_forbidden")
    r = await op.put("/v1/agents/bob/consent", json={"accepts_channels_from": ["Not An Id"]})
    assert (r.status_code, r.json()["code"]) == (400, "invalid_consent_entry")

    # Set at creation by the operator.
    made = await op.post("/v1/agents", json={"id": "dan", "accepts_channels_from": ["carol"]})
    assert made.status_code == 201, made.text
    r = await api(carol.token).post("/v1/channels", json={"name": "g3", "members": ["dan"]})
    assert r.status_code == 201, r.text
    events = (await op.get("/v1/events", params={"type": "agent.consent_changed"})).json()
    assert [e["subject"] for e in events] == ["bob", "bob"]


async def test_an_invited_agent_joins_when_it_accepts(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    carol = await make_agent("carol")
    group = (await api(alice.token).post("/v1/channels", json={"name": "g"})).json()
    r = await api(alice.token).post(
        f"/v1/channels/{group['id']}/invitations", json={"agent_id": "bob"}
    )
    assert r.status_code == 201, r.text
    invitation = r.json()
    assert (invitation["status"], invitation["invited_by"]) == ("pending", "alice")
    again = await api(alice.token).post(
        f"/v1/channels/{group['id']}/invitations", json={"agent_id": "bob"}
    )
    assert again.json()["id"] == invitation["id"]  # one pending invitation, one notice

    # bob is told, but is not a member until he accepts.
    inbox = (await api(bob.token).get("/v1/agents/bob/inbox")).json()
    assert [m["payload"]["invitation_id"] for m in inbox] == [invitation["id"]]
    assert inbox[0]["kind"] == "notice"
    assert (await hub.channels.get(alice.principal, group["id"])).members == ["alice"]
    listed = (await api(bob.token).get("/v1/invitations")).json()
    assert [i["id"] for i in listed] == [invitation["id"]]

    # Nobody else can accept it for him (not even the inviter).
    for other in (carol.token, alice.token):
        r = await api(other).post(f"/v1/invitations/{invitation['id']}/accept")
        assert (r.status_code, r.json()["code"]) == (404, "invitation_not_found")
    r = await api(bob.token).post(f"/v1/invitations/{invitation['id']}/accept")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "accepted"
    assert (await hub.channels.get(alice.principal, group["id"])).members == ["alice", "bob"]
    r = await api(bob.token).post(f"/v1/invitations/{invitation['id']}/decline")
    assert (r.status_code, r.json()["code"]) == (409, "invitation_closed")

    # A declined invitation leaves the channel as it was; the inviter is told either way.
    r = await api(bob.token).post(
        f"/v1/channels/{group['id']}/invitations", json={"agent_id": "carol"}
    )
    declined = await api(carol.token).post(f"/v1/invitations/{r.json()['id']}/decline")
    assert declined.json()["status"] == "declined"
    assert (await hub.channels.get(alice.principal, group["id"])).members == ["alice", "bob"]
    told = (await api(alice.token).get("/v1/agents/alice/inbox")).json()
    assert [m["subject"] for m in told] == ["bob accepted your invitation"]
    told = (await api(bob.token).get("/v1/agents/bob/inbox", params={"kind": "notice"})).json()
    assert told[-1]["subject"] == "carol declined your invitation"

    types = [
        e["type"]
        for e in (
            await api(hub.operator_token).get("/v1/events", params={"type": "invitation."})
        ).json()
    ]
    assert types == [
        "invitation.created",
        "invitation.accepted",
        "invitation.created",
        "invitation.declined",
    ]


async def test_invitation_refusals(
    hub: Hub, api: Any, operator: Principal, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    mallory = await make_agent("mallory")
    group = (await api(alice.token).post("/v1/channels", json={"name": "g"})).json()

    async def invite(token: str | None, channel_id: str, agent_id: str) -> tuple[int, str]:
        r = await api(token).post(
            f"/v1/channels/{channel_id}/invitations", json={"agent_id": agent_id}
        )
        return r.status_code, r.json().get("code", "")

    assert await invite(mallory.token, group["id"], "mallory") == (403, "channel_forbidden")
    assert await invite(alice.token, group["id"], "alice") == (409, "already_member")
    assert await invite(alice.token, group["id"], "ghost") == (404, "principal_not_found")
    assert await invite(alice.token, group["id"], "operator") == (400, "invitee_not_agent")
    work = alice.principal.work_channel_id or ""
    assert await invite(alice.token, work, "bob") == (409, "channel_not_invitable")
    r = await api(alice.token).post("/v1/invitations/nope/accept")
    assert (r.status_code, r.json()["code"]) == (404, "invitation_not_found")


@pytest.fixture
def connect(hub: Hub) -> Callable[[str], AbstractAsyncContextManager[Client]]:
    @asynccontextmanager
    async def open_session(token: str) -> AsyncIterator[Client]:
        async with Client(build_mcp(hub, token=token)) as client:
            yield client

    return open_session


async def test_mcp_agents_invite_accept_and_are_refused_with_the_code(
    hub: Hub, make_agent: MakeAgent, connect: Any
) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    async with connect(alice.token) as a, connect(bob.token) as b:
        manual = {t.name: t.description or "" for t in (await a.list_tools()).tools}
        assert "membership_consent_required" in manual["create_private_channel"]
        assert "consent" in manual["invite_to_channel"]
        refused = refusal(
            await a.call_tool("create_private_channel", {"name": "p", "members": ["bob"]})
        )
        assert refused["code"] == "membership_consent_required"
        made = data(await a.call_tool("create_private_channel", {"name": "p", "members": []}))
        invited = data(
            await a.call_tool("invite_to_channel", {"channel_id": made["id"], "agent_id": "bob"})
        )
        pending = data(await b.call_tool("list_invitations", {}))["invitations"]
        assert [i["id"] for i in pending] == [invited["id"]]
        accepted = data(await b.call_tool("accept_invitation", {"invitation_id": invited["id"]}))
        assert accepted["status"] == "accepted"
        channels = data(await b.call_tool("list_channels", {}))["channels"]
        assert made["id"] in {c["id"] for c in channels}
        again = refusal(await b.call_tool("decline_invitation", {"invitation_id": invited["id"]}))
        assert again["code"] == "invitation_closed"
    assert bob.principal.accepts_channels_from == []


async def test_the_operator_adds_without_consent_through_patch(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    await make_agent("alice")
    await make_agent("bob")
    channel = await hub.channels.create(operator, ChannelSpec(name="g", members=["alice"]))
    updated = await hub.channels.update(operator, channel.id, ChannelPatch(members=["bob"]))
    assert "bob" in updated.members
