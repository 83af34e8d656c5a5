"""Channels and rooms by name: a name names one open channel (one room), and every path that
takes a channel or room id takes its name or the start of its id too. A reference several fit
is refused with the candidates; a channel the caller cannot see is never found by its name."""

from __future__ import annotations

from typing import Any

from parley.core.channels import Channel
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.ports import Tx
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.rooms import RoomSpec
from tests.conftest import MakeAgent


async def legacy_duplicate(hub: Hub, name: str, members: list[str]) -> str:
    """A channel stored by a hub that did not keep names unique (an existing database)."""
    channel_id = new_ulid()

    async def job(tx: Tx) -> None:
        tx.insert(
            "channels",
            Channel(
                id=channel_id,
                name=name,
                kind="group",
                created_by="operator",
                created=hub.ctx.clock.now(),
                members=members,
            ),
        )
        await tx.flush()
        await tx.set_members(channel_id, members)

    await hub.store.write(job)
    return channel_id


async def test_a_channel_name_names_one_channel(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    op = api(hub.operator_token)
    first = await op.post("/v1/channels", json={"name": "design"})
    assert first.status_code == 201, first.text
    second = await op.post("/v1/channels", json={"name": "design"})
    assert (second.status_code, second.json()["code"]) == (409, "channel_name_taken")
    assert second.json()["details"]["existing_id"] == first.json()["id"]
    via_groups = await op.post("/v1/im/sessions", json={"name": "design", "kind": "group"})
    assert (via_groups.status_code, via_groups.json()["code"]) == (409, "channel_name_taken")

    # Deleted, the name is free again.
    assert (await op.delete("/v1/channels/design")).status_code == 200
    again = await hub.channels.create(operator, ChannelSpec(name="design"))
    assert again.id != first.json()["id"]


async def test_paths_take_a_name_or_an_id_prefix(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    bob = await make_agent("bob")
    op = api(hub.operator_token)
    design = await hub.channels.create(operator, ChannelSpec(name="design"))
    posted = await op.post("/v1/channels/design/messages", json={"content": "x"})
    assert posted.status_code == 201, posted.text
    assert posted.json()["message"]["channel_id"] == design.id
    shown = await op.get(f"/v1/im/sessions/{design.id[:20].lower()}")
    assert (shown.status_code, shown.json()["id"]) == (200, design.id)
    assert (await op.get("/v1/channels/nothing-like-it")).json()["code"] == "channel_not_found"

    # bob cannot see the operator's group: its name finds nothing for him.
    hidden = await api(bob.token).get("/v1/channels/design")
    assert (hidden.status_code, hidden.json()["code"]) == (404, "channel_not_found")
    assert design.id not in hidden.text


async def test_names_several_channels_share_are_refused_with_the_candidates(
    hub: Hub, operator: Principal, api: Any
) -> None:
    older = await legacy_duplicate(hub, "dup", ["operator"])
    newer = await legacy_duplicate(hub, "dup", ["operator"])
    op = api(hub.operator_token)
    refused = await op.get("/v1/channels/dup/messages")
    assert (refused.status_code, refused.json()["code"]) == (409, "ambiguous_channel")
    candidates = refused.json()["details"]["candidates"]
    assert sorted(c["id"] for c in candidates) == sorted([older, newer])
    assert older in refused.json()["message"] and newer in refused.json()["message"]
    # The full id still addresses each; a prefix both share is refused in the same way.
    assert (await op.get(f"/v1/channels/{older}")).json()["id"] == older
    common = next(i for i in range(26) if older[i] != newer[i])
    shared = await op.get(f"/v1/channels/{older[: max(common, 4)]}")
    if common >= 4:
        assert shared.json()["code"] == "ambiguous_channel"
    one = await op.get(f"/v1/channels/{newer[: common + 1]}")
    assert (one.status_code, one.json()["id"]) == (200, newer)


async def test_a_room_name_names_one_room_and_paths_take_it(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    op = api(hub.operator_token)
    made = await op.post("/v1/rooms", json={"name": "standup"})
    assert made.status_code == 201, made.text
    room_id = made.json()["id"]
    twice = await op.post("/v1/rooms", json={"name": "standup"})
    assert (twice.status_code, twice.json()["code"]) == (409, "room_name_taken")
    other = await hub.rooms.create(operator, RoomSpec(name="retro"))

    await make_agent("ann")
    joined = await op.post("/v1/rooms/standup/members", json={"agent_id": "ann"})
    assert joined.status_code in (200, 201), joined.text
    members = await op.get("/v1/rooms/standup/members")
    assert [m["agent_id"] for m in members.json()] == ["ann"]
    # The id without its "room-", or any unique start of it.
    bare = await op.get(f"/v1/rooms/{other.id.removeprefix('room-').lower()}")
    assert (bare.status_code, bare.json()["id"]) == (200, other.id)
    by_name = await op.get("/v1/rooms/standup")
    assert by_name.json()["id"] == room_id


async def test_paths_take_the_start_of_a_mail_worker_or_session_id(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    from parley.core.mail import SendRequest
    from parley.service.workers.records import StartSpec

    await make_agent("ann", runtime={"kind": "scripted", "replies": ["ok"]})
    note = SendRequest(to="ann", kind="notice", subject="s")
    sent = (await hub.mail.send(operator, note)).message
    worker = await hub.workers.start(operator, StartSpec(agent_id="ann", prompt="go", name="aud"))
    await hub.tasks.wait_idle()
    op = api(hub.operator_token)
    got = await op.get(f"/v1/mail/{sent.id[:-1].lower()}")
    assert (got.status_code, got.json()["id"]) == (200, sent.id), got.text
    shown = await op.get(f"/v1/workers/{worker.id.removeprefix('w-')}")
    assert (shown.status_code, shown.json()["id"]) == (200, worker.id), shown.text
    topology = await op.get("/v1/sessions/aud/topology")
    assert topology.json()["session"]["id"] == worker.session_id, topology.text
    # A start no id has (LIKE wildcards taken as text): the route refuses it as unknown.
    assert (await op.get("/v1/mail/0%25_x")).json()["code"] == "message_not_found"


async def test_an_invitee_accepts_by_the_start_of_the_invitations_id(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Any
) -> None:
    ann = await make_agent("ann")
    bob = await make_agent("bob")
    design = await hub.channels.create(operator, ChannelSpec(name="design"))
    invitation = await hub.invitations.invite(operator, design.id, "ann")
    # Someone else's invitation is not found by its start, as by its id.
    theirs = await api(bob.token).post(f"/v1/invitations/{invitation.id[:12]}/accept")
    assert (theirs.status_code, theirs.json()["code"]) == (404, "invitation_not_found")
    assert invitation.id not in theirs.text
    accepted = await api(ann.token).post(f"/v1/invitations/{invitation.id[:12]}/accept")
    assert (accepted.status_code, accepted.json()["status"]) == (200, "accepted"), accepted.text
