"""M9 through the hub: whatever mail one hub holds, exporting it and importing the files into
another hub gives the very same messages, every field of them, on either store."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.core.ids import new_ulid
from parley.core.mail import Message
from parley.core.ports import Tx
from parley.service.hub import Hub
from parley.testing import FakeClock
from tests.integration.mail_support import all_messages
from tests.integration.test_mail_mailroom import add_agents, empty_hub, operator_of
from tests.unit.test_mailroom_exact import messages

# What the store can hold: any Unicode text but NUL (see core/limits.py).
_storable = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
_example = itertools.count()
RESULT_TIMEOUT_S = 60.0


async def _hold(hub: Hub, batch: list[Message]) -> None:
    """Put mail straight into the hub's store, each inbox numbered 1, 2, … as the hub does."""
    positions: dict[str, int] = {}
    stored = []
    for msg in batch:
        positions[msg.recipient_id] = positions.get(msg.recipient_id, 0) + 1
        stored.append(msg.model_copy(update={"seq": positions[msg.recipient_id]}))

    async def job(tx: Tx) -> None:
        for msg in stored:
            tx.insert("messages", msg)

    await hub.store.write(job)


async def test_any_mail_survives_export_and_import_exactly(
    hub: Hub, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    loop = asyncio.get_running_loop()
    async with empty_hub(backend, tmp_path, clock) as other:
        source_op, target_op = await operator_of(hub), await operator_of(other)

        async def check(n: int, batch: list[Message]) -> None:
            owners = sorted({msg.recipient_id for msg in batch})
            await add_agents(hub, *owners)
            await add_agents(other, *owners)
            await _hold(hub, batch)
            files = await hub.mailroom.export(source_op)
            result = await other.mailroom.import_files(target_op, files)
            assert result.imported == len(batch)
            ids = {msg.id for msg in batch}
            held = {m.id: m for m in await all_messages(hub) if m.id in ids}
            imported = {m.id: m for m in await all_messages(other) if m.id in ids}
            assert imported == held

        # Hypothesis drives the examples from a thread; the hubs live on this loop. One hub pair
        # serves every example: each draws fresh inbox owners and ids, so the import skips the
        # mail of earlier examples and only this example's mail is compared.
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def round_trip(data: st.DataObject) -> None:
            n = next(_example)
            owners = st.sampled_from([f"owner{n}-0", f"owner{n}-1"])
            batch = []
            for i in range(data.draw(st.integers(1, 4))):
                msg = data.draw(messages(message_id=new_ulid(), text=_storable, recipients=owners))
                # An original's idempotency key is unique per sender, as the hub keeps it.
                if msg.idempotency_key is not None:
                    msg = msg.model_copy(
                        update={"idempotency_key": f"{msg.idempotency_key}-{n}.{i}"}
                    )
                batch.append(msg)
            asyncio.run_coroutine_threadsafe(check(n, batch), loop).result(RESULT_TIMEOUT_S)

        await asyncio.to_thread(round_trip)
