"""A database made by an earlier parley is upgraded in place on start (P3): the 0002 migration
adds membership consent to a 0001 database that already holds agents, channels and mail."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from alembic import command
from sqlalchemy import String, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from parley.adapters.store import migrate
from parley.adapters.store.postgres import async_url
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import PermissionDenied
from parley.service.conversations.channels import ChannelSpec
from parley.testing import FakeClock

# Databases made at older revisions.
pytestmark = pytest.mark.fresh_database


def _to_0001(connection: Connection) -> None:
    command.upgrade(migrate._config(connection), "0001")


async def _make_0001_database(database_url: str) -> None:
    if database_url.startswith("sqlite:///"):
        path = Path(database_url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite+aiosqlite:///{path}"
    else:
        url = async_url(database_url)
    engine = create_async_engine(url)
    created = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_to_0001)
            for agent_id in ("old-alice", "old-bob"):
                await conn.execute(
                    text(
                        "INSERT INTO principals (id, kind, role, display_name, persona, runtime,"
                        " active, created, inbox_seq) VALUES (:id, 'agent', 'member', :id, '',"
                        ' \'{"kind": "none"}\', true, :created, 0)'
                    ),
                    {"id": agent_id, "created": created},
                )
    finally:
        await engine.dispose()


async def test_a_0001_database_with_agents_upgrades_to_consent(
    database_url: str, tmp_path: Path
) -> None:
    await _make_0001_database(database_url)
    settings = Settings(home=tmp_path / "data", database_url=database_url)
    hub = build_hub(settings, clock=FakeClock())
    await hub.start(background=False)
    try:
        async with hub.store.read() as tx:
            # The SQL store's own statements: not part of the Tx port.
            version = await cast(Any, tx).execute(
                text("SELECT version_num FROM alembic_version").columns(version_num=String)
            )
            assert version.scalar() == migrate.head_revision()
        alice = await hub.identity.require("old-alice")
        bob = await hub.identity.require("old-bob")
        # Agents that existed before consent consent to nobody, like new ones.
        assert bob.accepts_channels_from == []
        try:
            await hub.channels.create(alice, ChannelSpec(name="g", members=["old-bob"]))
        except PermissionDenied as exc:
            assert exc.code == "membership_consent_required"
        else:
            raise AssertionError("an upgraded agent was added without its consent")
        channel = await hub.channels.create(alice, ChannelSpec(name="g"))
        invitation = await hub.invitations.invite(alice, channel.id, "old-bob")
        await hub.invitations.accept(bob, invitation.id)
        assert (await hub.channels.get(alice, channel.id)).members == ["old-alice", "old-bob"]
        updated = await hub.identity.set_consent(bob, "old-bob", ["old-alice"])
        assert updated.accepts_channels_from == ["old-alice"]
    finally:
        await hub.stop()
