"""P3: a hub refuses to start on a schema it does not know, one a newer parley migrated."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from parley.adapters.store.postgres import async_url
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import SchemaTooNew
from parley.testing import FakeClock

FUTURE_REVISION = "9999_from_a_newer_parley"

# A database stamped with a revision this parley does not know.
pytestmark = pytest.mark.fresh_database


async def stamp_future_revision(database_url: str) -> None:
    """Mark a migrated database as migrated further, by a parley this one does not know."""
    if database_url.startswith("sqlite:///"):
        url = f"sqlite+aiosqlite:///{Path(database_url.removeprefix('sqlite:///'))}"
    else:
        url = async_url(database_url)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE alembic_version SET version_num = :rev"), {"rev": FUTURE_REVISION}
            )
    finally:
        await engine.dispose()


async def test_a_hub_refuses_a_schema_newer_than_it_knows(
    settings: Settings, database_url: str, clock: FakeClock
) -> None:
    first = build_hub(settings, clock=clock)
    await first.start(background=False)
    await first.stop()
    await stamp_future_revision(database_url)

    again = build_hub(settings, clock=clock)
    with pytest.raises(SchemaTooNew) as info:
        await again.start(background=False)
    await again.stop()
    assert info.value.code == "schema_too_new"
    assert repr(FUTURE_REVISION) in info.value.message
    assert "Upgrade parley" in info.value.message
    assert info.value.details["revision"] == FUTURE_REVISION
