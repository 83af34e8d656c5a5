"""What a room's record says: a moderator runtime's secrets never come back out of the REST API
(Q8), and a meeting a pulse escalates to names both the seat it was convened as and who ran
the pulse (R10)."""

from __future__ import annotations

import json
from typing import Any

from parley.core.events import Event
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import members, room_with

API_KEY = "sk-moderator-0123456789abcdef"
PASSWORD = "hunter22-moderator"
ENV_VALUE = "org-moderator-secret"
MODERATOR = {
    "kind": "openai",
    "model": "gpt-test",
    "api_key": API_KEY,
    "base_url": f"https://mod:{PASSWORD}@models.test/v1",
    "env": {"OPENAI_ORGANIZATION": ENV_VALUE},
}
QUIET = dict(
    silent_after_s=600.0,
    brief_stale_after_s=1200.0,
    no_progress_after_s=1800.0,
    min_meeting_interval_s=3600.0,
    max_rounds=1,
)


def assert_no_secret(body: str) -> None:
    for secret in (API_KEY, PASSWORD, ENV_VALUE):
        assert secret not in body


async def test_a_room_moderator_runtime_is_redacted_for_the_operator_too(
    hub: Hub, operator: Principal, api: Any
) -> None:
    op = api(hub.operator_token)
    r = await op.post(
        "/v1/rooms", json={"name": "sync", "config": {"moderator_runtime": MODERATOR}}
    )
    assert r.status_code == 201, r.text
    created = r.json()
    room_id = created["id"]
    bodies = [
        r.text,
        (await op.get(f"/v1/rooms/{room_id}")).text,
        (await op.get("/v1/rooms")).text,
    ]
    for body in bodies:
        assert_no_secret(body)
    shown = created["config"]["moderator_runtime"]
    assert shown["kind"] == "openai" and shown["model"] == "gpt-test"
    assert shown["api_key"] == "***" and shown["env"] == {"OPENAI_ORGANIZATION": "***"}
    assert shown["base_url"] == "https://***@models.test/v1"
    assert json.loads(bodies[2])[0]["config"]["moderator_runtime"] == shown
    # The hub keeps the credentials it needs to call the moderator.
    kept = (await hub.rooms.get(operator, room_id)).config.moderator_runtime
    assert (kept["api_key"], kept["env"]["OPENAI_ORGANIZATION"]) == (API_KEY, ENV_VALUE)


async def escalation_events(hub: Hub, meeting_id: str, room_id: str) -> tuple[Event, Event]:
    async with hub.store.read() as tx:
        convened = await hub.ctx.events.query(tx, type="meeting.convened")
        pulses = await hub.ctx.events.query(tx, type="room.pulse", subject=f"room:{room_id}")
    [event] = [e for e in convened if e.subject == f"meeting:{meeting_id}"]
    return event, pulses[-1]


async def stalled_room(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> str:
    """A room whose member ``a`` keeps posting the same brief: a stall a pulse escalates."""
    await members(make_agent, runtimes, ["a", "b"])
    room = await room_with(hub, operator, ["a", "b"], **QUIET)
    a = await hub.identity.require("a")
    for _ in range(3):
        await hub.rooms.post_brief(a, "still stuck on test 7")
    await hub.rooms.post_brief(await hub.identity.require("b"), "fine")
    return room.id


async def test_a_meeting_an_agent_pulse_escalates_names_the_agent_and_the_seat(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    room_id = await stalled_room(hub, operator, make_agent, runtimes)
    token = await hub.identity.issue_token(operator, "a", rotate=False)
    r = await api(token).post(f"/v1/rooms/{room_id}/pulse")
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["escalated"] and result["meeting_id"]
    meeting_id = result["meeting_id"]
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()

    meeting = await hub.meetings.get(operator, meeting_id)
    assert meeting.convened_by == "operator"  # the seat: the room's moderator, not a's model
    opening = (await hub.meetings.transcript(operator, meeting_id, limit=1)).rows[0].content
    assert opening.startswith(
        "[Meeting convened by operator (the escalation seat) after a pulse run by a found a "
        'stall] Topic: "Stall in room sync'
    )
    convened, pulse = await escalation_events(hub, meeting_id, room_id)
    assert convened.actor == "a"
    assert (convened.payload["seat"], convened.payload["triggered_by"]) == ("operator", "a")
    assert pulse.actor == "a" and pulse.payload["meeting_id"] == meeting_id


async def test_a_scheduled_pulse_is_recorded_as_the_hub_s_own(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    room_id = await stalled_room(hub, operator, make_agent, runtimes)
    await hub.pulse.pulse_all()
    [entry] = await hub.pulse.log(operator, room_id)
    assert entry.escalated and entry.meeting_id is not None
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    opening = (await hub.meetings.transcript(operator, entry.meeting_id, limit=1)).rows[0]
    assert "(the escalation seat) after the scheduled pulse found a stall]" in opening.content
    convened, pulse = await escalation_events(hub, entry.meeting_id, room_id)
    assert (convened.actor, convened.payload["triggered_by"]) == ("system", None)
    assert convened.payload["seat"] == "operator" and pulse.actor == "system"
