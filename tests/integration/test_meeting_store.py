"""The store reads and writes of a meeting turn (R3, R7), on every backend: the speaker's sources
read in one statement give what the general queries give, and a turn's counters are updated and
given back under the meeting row's lock."""

from __future__ import annotations

import asyncio

from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.mail import OPEN_STATUSES, InboxFilter
from parley.core.meetings import SpeakerSources
from parley.core.ports import Tx
from parley.core.rooms import Meeting
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from parley.service.meetings.meetings import ConveneSpec
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.meeting_support import members, room_with


async def _mail(hub: Hub, recipient: str, kind: str, subject: str) -> str:
    async def job(tx: Tx) -> str:
        sent = await hub.mail.deliver_system(tx, recipient, kind, subject, f"body of {subject}")  # type: ignore[arg-type]
        return sent.id

    return await hub.store.write(job)


async def _post(hub: Hub, channel_id: str, sender: str, texts: list[str]) -> None:
    async def job(tx: Tx) -> None:
        for text in texts:
            await hub.channels.append(
                tx, channel_id, sender_id=sender, sender_kind="agent", content=text
            )

    await hub.store.write(job)


async def test_speaker_sources_read_what_the_general_queries_read(
    hub: Hub, operator: Principal, make_agent: MakeAgent
) -> None:
    a = (await make_agent("a")).principal
    await make_agent("b")
    assert a.work_channel_id is not None
    await _post(hub, a.work_channel_id, "a", [f"work {i}" for i in range(25)])
    ids = [await _mail(hub, "a", "task", f"a-mail {i}") for i in range(24)]
    await _mail(hub, "a", "minutes", "a-minutes")
    await _mail(hub, "b", "task", "b-mail")
    # Closed mail is not open: the first open mails are read past it.
    for message_id in ids[:3]:
        await hub.mail.archive(operator, message_id, None)
    meeting_channel = new_ulid()

    async def seat(tx: Tx) -> None:
        await tx.set_members(meeting_channel, ["zed", "a", "b"])

    await hub.store.write(seat)

    async with hub.store.read() as tx:
        found = await tx.speaker_sources(meeting_channel, "a", a.work_channel_id, 20)
        work = await tx.channel_messages(a.work_channel_id, latest=20)
        inbox = await tx.list_inbox("a", InboxFilter(status=list(OPEN_STATUSES), limit=100))
    newest = [m for m in inbox if m.kind != "minutes"][-20:]
    assert found == SpeakerSources(
        channel_members=["zed", "a", "b"],
        work=[(m.sender_id, m.content) for m in work],
        mail=[(m.kind, m.subject, m.body) for m in newest],
    )
    # The newest work messages and the newest open mails but minutes, in order.
    assert [content for _, content in found.work] == [f"work {i}" for i in range(5, 25)]
    assert [subject for _, subject, _ in found.mail] == [f"a-mail {i}" for i in range(4, 24)]


async def test_speaker_sources_of_an_agent_without_work_or_mail_are_empty(
    hub: Hub, make_agent: MakeAgent
) -> None:
    await make_agent("a")
    async with hub.store.read() as tx:
        found = await tx.speaker_sources("no-such-channel", "a", None, 20)
    assert found == SpeakerSources(channel_members=[], work=[], mail=[])


async def test_counting_a_turn_updates_the_row_and_gives_it_back(hub: Hub) -> None:
    meeting = Meeting(
        id="mtg-counted",
        room_id="room",
        channel_id="channel",
        topic="t",
        convened_by="a",
        round=1,
        created=hub.ctx.clock.now(),
    )

    async def job(tx: Tx) -> list[Meeting | None]:
        tx.insert("meetings", meeting)
        return [
            await tx.count_meeting_turn(meeting.id, spoke=True, round_number=1),
            await tx.count_meeting_turn(meeting.id, spoke=False, round_number=2),
            await tx.count_meeting_turn("mtg-none", spoke=True, round_number=1),
        ]

    first, second, missing = await hub.store.write(job)
    assert first == meeting.model_copy(update={"speeches": 1, "turns": 1, "round": 1})
    assert second == meeting.model_copy(update={"speeches": 1, "turns": 2, "round": 2})
    assert missing is None
    async with hub.store.read() as tx:
        assert await tx.get("meetings", meeting.id) == second


async def test_a_speaker_is_told_its_own_open_mail_and_the_humans_present(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    team = await members(make_agent, runtimes, ["a", "b"])
    await hub.identity.create_human(operator, HumanSpec(id="hana"))
    hana = await hub.identity.require("hana")
    await _mail(hub, "a", "task", "MAIL-a")
    await _mail(hub, "b", "task", "MAIL-b")
    await _mail(hub, "a", "minutes", "MINUTES-a")
    team["a"].speech_gate = asyncio.Event()
    room = await room_with(hub, operator, ["a", "b"], max_rounds=1)
    meeting = await hub.meetings.convene(operator, room.id, ConveneSpec(topic="t"))
    await team["a"].speech_started.wait()
    # A human who speaks joins the meeting's channel: the next speaker sees it present.
    await hub.meetings.post(hana, meeting.id, "a word from a human")
    team["a"].speech_gate.set()
    await hub.meetings.wait_idle()
    await hub.tasks.wait_idle()
    seen_by_a = team["a"].speech_turns()[0].prompt.system
    seen_by_b = team["b"].speech_turns()[0].prompt.system
    assert "MAIL-a" in seen_by_a and "MAIL-b" not in seen_by_a
    assert "MAIL-b" in seen_by_b and "MAIL-a" not in seen_by_b
    # Minutes of earlier meetings are not context to bring into the next one.
    assert "MINUTES-a" not in seen_by_a
    # The convening operator is in the meeting's channel from the start, the human once it spoke.
    assert "Present: a, b, operator\n" in seen_by_a
    assert "Present: a, b, operator, hana\n" in seen_by_b
