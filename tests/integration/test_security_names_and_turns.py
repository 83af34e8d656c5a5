"""Names and id prefixes in paths, and the tokens of CLI turns, under attack: a reference too
long to address anything is refused as unknown (never a storage failure), others' records
neither crowd out nor are named among the caller's own, and a turn token a rotation ended does
not come back with the session's next turn."""

from __future__ import annotations

from typing import Any

import pytest

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.errors import Unauthenticated
from parley.core.identity import Principal
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.meetings.meetings import ConveneSpec
from parley.service.meetings.rooms import RoomSpec
from parley.service.turn_access import TurnBinding
from parley.service.workers.records import StartSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import members, room_with

# Longer than any name, and longer than SQLite's longest LIKE pattern (50,000 characters).
LONG = "A" * 60_000


@pytest.mark.parametrize(
    ("path", "code"),
    [
        (f"/v1/mail/{LONG}", "message_not_found"),
        (f"/v1/tasks/{LONG}", "task_not_found"),
        (f"/v1/channels/{LONG}", "channel_not_found"),
        (f"/v1/channels/{LONG}/messages", "channel_not_found"),
        (f"/v1/rooms/{LONG}", "room_not_found"),
        (f"/v1/workers/{LONG}", "worker_not_found"),
    ],
)
async def test_a_reference_too_long_for_any_name_is_unknown(
    path: str, code: str, hub: Hub, api: Any, operator: Principal, make_agent: MakeAgent
) -> None:
    mallory = await make_agent("mallory")
    # Rows to match against: a store may skip the pattern of an empty table.
    await hub.channels.create(operator, ChannelSpec(name="core", members=["mallory"]))
    await hub.rooms.create(operator, RoomSpec(name="hall"))
    sent = await api(mallory.token).post(
        "/v1/mail", json={"to": "operator", "kind": "notice", "subject": "hi"}
    )
    assert sent.status_code == 201, sent.text
    for token in (mallory.token, hub.operator_token):
        answer = await api(token).get(path)
        assert (answer.status_code, answer.json()["code"]) == (404, code), answer.text[:300]


async def test_a_name_of_the_longest_length_still_addresses_its_channel(
    hub: Hub, api: Any, operator: Principal
) -> None:
    name = "n" * 200
    channel = await hub.channels.create(operator, ChannelSpec(name=name, members=[]))
    answer = await api(hub.operator_token).get(f"/v1/channels/{name}")
    assert (answer.status_code, answer.json()["id"]) == (200, channel.id)


async def test_a_turn_token_ended_by_a_rotation_is_not_given_out_again(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    await make_agent("lead")
    access = hub.identity.turn_access
    binding = TurnBinding("lead", "ch-1", "vs-1")
    with access.open(binding) as leaked:
        assert (await hub.identity.authenticate(leaked)).id == "lead"
    await hub.identity.issue_token(operator, "lead", rotate=True)
    # The session's next turn runs with a token of its own; the one from before the rotation
    # stays refused while that turn runs.
    with access.open(binding) as token:
        assert token != leaked
        assert (await hub.identity.authenticate(token)).id == "lead"
        with pytest.raises(Unauthenticated):
            await hub.identity.authenticate(leaked)
    # A rotation of another agent leaves this one's turn tokens as they are.
    await make_agent("other")
    with access.open(binding) as before:
        await hub.identity.issue_token(operator, "other", rotate=True)
        assert (await hub.identity.authenticate(before)).id == "lead"


async def test_others_mail_neither_hides_nor_is_named_by_an_id_prefix(
    api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    mallory = await make_agent("mallory")
    others = []
    for i in range(60):
        sent = await api(alice.token).post(
            "/v1/mail", json={"to": "bob", "kind": "notice", "subject": f"s{i}"}
        )
        others.append(sent.json()["id"])
    own = await api(mallory.token).post(
        "/v1/mail", json={"to": "mallory", "kind": "notice", "subject": "mine"}
    )
    mine = own.json()["id"]
    # Made within moments of each other, the ids share their first characters (those of the
    # time), and the others' sort before mallory's own.
    prefix = mine
    while not all(other.startswith(prefix) for other in others):
        prefix = prefix[:-1]
    assert len(prefix) >= 4
    found = await api(mallory.token).get(f"/v1/mail/{prefix}")
    assert (found.status_code, found.json()["id"]) == (200, mine), found.text
    # Once the prefix fits two of hers, the refusal names those two and none of the others.
    second = await api(mallory.token).post(
        "/v1/mail", json={"to": "mallory", "kind": "notice", "subject": "again"}
    )
    refused = await api(mallory.token).get(f"/v1/mail/{prefix}")
    assert (refused.status_code, refused.json()["code"]) == (409, "ambiguous_message")
    named = {c["id"] for c in refused.json()["details"]["candidates"]}
    assert named == {mine, second.json()["id"]}
    assert not set(others) & set(refused.text.replace('"', " ").replace(",", " ").split())


async def test_others_tasks_neither_hide_nor_cost_a_read_each(
    hub: Hub,
    api: Any,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_agent("helper", runtime={"kind": "scripted"})
    runtimes.set("helper", ScriptedRuntime(lambda turn: "ok"))
    mallory = await make_agent("mallory")
    hidden = await hub.channels.create(operator, ChannelSpec(name="inner", members=["helper"]))
    for i in range(55):
        posted = await api(hub.operator_token).post(
            f"/v1/channels/{hidden.id}/messages", json={"content": f"job {i}"}
        )
        assert posted.status_code == 201, posted.text
        await hub.tasks.wait_idle()
    own = await hub.channels.create(
        operator, ChannelSpec(name="mine", members=["mallory", "helper"])
    )
    posted = await api(hub.operator_token).post(
        f"/v1/channels/{own.id}/messages", json={"content": "a job for mallory's channel"}
    )
    assert posted.status_code == 201, posted.text
    await hub.tasks.wait_idle()
    mine = [t.id for t in await hub.tasks.of_channel(mallory.principal, own.id)]
    others = [t.id for t in await hub.tasks.of_channel(operator, hidden.id)]
    assert len(mine) == 1 and len(others) == 55
    prefix = mine[0]
    while not all(other.startswith(prefix) for other in others):
        prefix = prefix[:-1]
    assert len(prefix) >= 4

    read: list[str] = []
    get = hub.tasks.get

    async def counted(caller: Principal, task_id: str) -> Any:
        read.append(task_id)
        return await get(caller, task_id)

    monkeypatch.setattr(hub.tasks, "get", counted)
    found = await api(mallory.token).get(f"/v1/tasks/{prefix}")
    assert found.status_code == 200, found.text
    assert found.json()["id"] == mine[0]
    assert not set(read) & set(others)


async def test_an_agent_reads_no_other_rooms_meeting_to_resolve_a_prefix(
    hub: Hub,
    api: Any,
    operator: Principal,
    make_agent: MakeAgent,
    runtimes: StaticRuntimes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await members(make_agent, runtimes, ["m"])
    room = await room_with(hub, operator, ["m"], max_rounds=1)
    held = []
    for topic in ("one", "two"):
        held.append((await hub.meetings.convene(operator, room.id, ConveneSpec(topic=topic))).id)
        await hub.meetings.wait_idle()
        await hub.tasks.wait_idle()
    mallory = await make_agent("mallory")
    await hub.rooms.join(
        operator, (await hub.rooms.create(operator, RoomSpec(name="own"))).id, "mallory"
    )

    read: list[str] = []
    get = hub.meetings.get

    async def counted(caller: Principal, meeting_id: str) -> Any:
        read.append(meeting_id)
        return await get(caller, meeting_id)

    monkeypatch.setattr(hub.meetings, "get", counted)
    answer = await api(mallory.token).get(f"/v1/rooms/meetings/{held[0][:8]}")
    assert (answer.status_code, answer.json()["code"]) == (404, "meeting_not_found")
    assert not set(read) & set(held)
    # The operator's prefix still fits both, and the refusal names them.
    both = await api(hub.operator_token).get(f"/v1/rooms/meetings/{held[0][:8]}")
    assert (both.status_code, both.json()["code"]) == (409, "ambiguous_meeting")
    assert {c["id"] for c in both.json()["details"]["candidates"]} == set(held)


async def test_others_sessions_of_one_name_do_not_hide_the_callers_own(
    hub: Hub, api: Any, operator: Principal, make_agent: MakeAgent
) -> None:
    await make_agent("alice", runtime={"kind": "scripted", "replies": ["ok"]})
    bob = await make_agent("bob", runtime={"kind": "scripted", "replies": ["ok"]})
    # More of alice's sessions of that name than a lookup looks at, all older than bob's.
    for _ in range(51):
        await hub.workers.start(operator, StartSpec(agent_id="alice", prompt="go", name="audit"))
    bobs = await hub.workers.start(operator, StartSpec(agent_id="bob", prompt="go", name="audit"))
    await hub.tasks.wait_idle()
    shown = await api(bob.token).get("/v1/sessions/audit/topology")
    assert shown.status_code == 200, shown.text
    assert shown.json()["session"]["id"] == bobs.session_id


def _shared_start(own: str, others: list[str]) -> str:
    """The longest start of ``own`` that every one of ``others`` shares (ids made within moments
    of each other share those of the time)."""
    prefix = own
    while not all(other.startswith(prefix) for other in others):
        prefix = prefix[:-1]
    assert len(prefix) >= 4
    return prefix


async def test_others_channels_and_rooms_do_not_hide_the_callers_own(
    hub: Hub, api: Any, operator: Principal, make_agent: MakeAgent
) -> None:
    hidden_channels = [
        (await hub.channels.create(operator, ChannelSpec(name=f"c{i}", members=[]))).id
        for i in range(55)
    ]
    hidden_rooms = [
        (await hub.rooms.create(operator, RoomSpec(name=f"r{i}"))).id for i in range(55)
    ]
    # Mallory's own come after them: her work channel, and the room she joins.
    mallory = await make_agent("mallory")
    room = await hub.rooms.create(operator, RoomSpec(name="own"))
    await hub.rooms.join(operator, room.id, "mallory")

    own = mallory.principal.work_channel_id
    assert own is not None
    found = await api(mallory.token).get(f"/v1/channels/{_shared_start(own, hidden_channels)}")
    assert found.status_code == 200, found.text
    assert found.json()["id"] == own
    found = await api(mallory.token).get(f"/v1/rooms/{_shared_start(room.id, hidden_rooms)}")
    assert found.status_code == 200, found.text
    assert found.json()["id"] == room.id
