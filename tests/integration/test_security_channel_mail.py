"""Mail to a channel reaches only its members, from its members (M4, M5): an outsider can neither
write into a private group nor learn who is in it, and a sender reads the message it sent once,
not one copy per recipient."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from tests.conftest import MakeAgent


async def _team(make_agent: MakeAgent) -> dict[str, Any]:
    return {name: await make_agent(name) for name in ("alice", "bob", "carol", "mallory")}


@pytest.mark.parametrize("private", [True, False])
async def test_only_members_may_address_mail_to_a_channel(
    private: bool, hub: Hub, api: Any, operator: Principal, make_agent: MakeAgent
) -> None:
    team = await _team(make_agent)
    channel = await hub.channels.create(
        operator, ChannelSpec(name="core", members=["alice", "bob", "carol"], private=private)
    )
    outsider = await api(team["mallory"].token).post(
        "/v1/mail", json={"to": f"channel:{channel.id}", "kind": "notice", "subject": "hi"}
    )
    assert outsider.status_code == 403, outsider.text
    refusal = outsider.json()
    assert refusal["code"] == "not_channel_member"
    # The refusal says what to do and names no member.
    assert not {"alice", "bob", "carol"} & set(refusal["message"].replace("'", " ").split())
    for member in ("alice", "bob", "carol"):
        inbox = (await api(team[member].token).get(f"/v1/agents/{member}/inbox")).json()
        assert inbox == []

    # Members and the operator still address the channel.
    for sender in (team["alice"].token, hub.operator_token):
        sent = await api(sender).post(
            "/v1/mail", json={"to": f"channel:{channel.id}", "kind": "notice", "subject": "ok"}
        )
        assert sent.status_code == 201, sent.text


async def test_a_non_member_may_not_address_a_discussion_channel(
    hub: Hub, api: Any, make_agent: MakeAgent, tmp_path: Path
) -> None:
    (tmp_path / "lead").mkdir()
    lead = await make_agent("lead", workspace=str(tmp_path / "lead"))
    await make_agent("rev", accepts_channels_from=["lead"])
    mallory = await make_agent("mallory")
    discussion = await hub.discussions.create_private_channel(
        lead.principal, "d", ["rev"], lead.principal.work_channel_id, "decide"
    )
    r = await api(mallory.token).post(
        "/v1/mail", json={"to": f"channel:{discussion.id}", "kind": "notice", "subject": "x"}
    )
    assert (r.status_code, r.json()["code"]) == (403, "not_channel_member")
    assert "rev" not in r.json()["message"]


async def test_a_sender_reads_its_message_once_not_the_copies(
    hub: Hub, api: Any, operator: Principal, make_agent: MakeAgent
) -> None:
    team = await _team(make_agent)
    channel = await hub.channels.create(
        operator,
        ChannelSpec(name="core", members=["alice", "bob", "carol", "mallory"], private=True),
    )
    alice = api(team["alice"].token)
    sent = (
        await alice.post(
            "/v1/mail", json={"to": f"channel:{channel.id}", "kind": "notice", "subject": "s"}
        )
    ).json()
    # The operator (a member too, as the channel's creator) sees every copy: one per recipient.
    everything = (await api(hub.operator_token).get(f"/v1/mail/{sent['id']}/thread")).json()
    assert sorted(m["recipient_id"] for m in everything) == ["bob", "carol", "mallory", "operator"]
    copies = [m for m in everything if m["copy_of"] == sent["id"]]
    assert len(copies) == 3

    # The sender sees the message it sent, once.
    mine = (await alice.get(f"/v1/mail/{sent['id']}/thread")).json()
    assert [m["id"] for m in mine] == [sent["id"]]
    for copy in copies:
        r = await alice.get(f"/v1/mail/{copy['id']}")
        assert (r.status_code, r.json()["code"]) == (403, "message_forbidden")
        assert copy["recipient_id"] not in r.json()["message"]
        r = await alice.get(f"/v1/mail/{copy['id']}/thread")
        assert r.status_code == 403

    # A recipient reads its own copy, and its thread shows what it may read.
    bob_inbox = (await api(team["bob"].token).get("/v1/agents/bob/inbox")).json()
    assert len(bob_inbox) == 1
    bob_thread = (await api(team["bob"].token).get(f"/v1/mail/{bob_inbox[0]['id']}/thread")).json()
    assert {m["recipient_id"] for m in bob_thread} == {"bob"}


async def test_cc_copies_do_not_show_in_the_senders_thread(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    team = await _team(make_agent)
    alice = api(team["alice"].token)
    sent = (
        await alice.post(
            "/v1/mail", json={"to": "bob", "cc": ["carol"], "kind": "notice", "subject": "s"}
        )
    ).json()
    thread = (await alice.get(f"/v1/mail/{sent['id']}/thread")).json()
    assert [m["id"] for m in thread] == [sent["id"]]
    # A stranger is refused without learning whose inbox the message is in.
    r = await api(team["mallory"].token).get(f"/v1/mail/{sent['id']}")
    assert (r.status_code, r.json()["code"]) == (403, "message_forbidden")
    assert "bob" not in r.json()["message"]
