"""What needs whom (the web UI's "Needs you"), read as each viewer: a blocker needs its
recipient and the operator, a stall-escalated meeting its seat and the operator; another human
is counted none of them. On both backends: the pulse log and pending turns are read from the
store directly."""

from __future__ import annotations

import asyncio

from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.mail import SendRequest
from parley.core.ports import Tx
from parley.core.rooms import PulseEntry
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from parley.service.meetings.meetings import ConveneSpec, Escalation
from parley.surfaces.web.attention import needs
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import within
from tests.integration.meeting_support import members, room_with


async def test_a_blocker_needs_its_recipient_and_the_operator_only(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    alpha = await make_agent("alpha", runtime={"kind": "none"})
    hana = (await hub.identity.create_human(operator, HumanSpec(id="hana"))).principal
    ines = (await hub.identity.create_human(operator, HumanSpec(id="ines"))).principal
    await hub.mail.send(alpha.principal, SendRequest(to="hana", kind="blocker", subject="stuck"))
    await hub.mail.send(alpha.principal, SendRequest(to="hana", kind="notice", subject="fyi"))

    for viewer, expected in ((hana, 1), (operator, 1), (ines, 0)):
        found = await needs(hub, viewer)
        assert [(n.what, n.title) for n in found] == [("blocker", "alpha: stuck")] * expected
    assert await needs(hub, alpha.principal) == []  # an agent's console counts no blockers


async def test_a_meeting_a_stall_escalated_needs_its_seat(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["ada"])
    team["ada"].speech_gate = asyncio.Event()  # held: the meeting stays running
    room = await room_with(hub, operator, ["ada"], max_rounds=1)
    hana = (await hub.identity.create_human(operator, HumanSpec(id="hana"))).principal
    meeting = await hub.meetings.convene(
        operator, room.id, ConveneSpec(topic="the queue is stuck"), escalation=Escalation(None)
    )
    await within(team["ada"].speech_started.wait(), "ada's speech")

    async def log(tx: Tx) -> None:
        entry = PulseEntry(
            id=new_ulid(),
            room_id=room.id,
            conclusion="stalled",
            escalated=True,
            reason="escalated (no progress)",
            meeting_id=meeting.id,
            created=hub.ctx.clock.now(),
        )
        tx.insert("pulse_log", entry)

    await hub.store.write(log)
    try:
        found = await needs(hub, operator)
        assert [(n.what, n.title) for n in found] == [("stall escalated", "the queue is stuck")]
        assert await needs(hub, hana) == []  # convened as the operator's seat, not hana's
    finally:
        await hub.meetings.stop(operator)
    assert await needs(hub, operator) == []  # an ended meeting needs nobody
