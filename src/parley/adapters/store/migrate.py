"""Run Alembic migrations on start, refusing a database whose schema is newer than this code."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from parley.core.errors import SchemaTooNew

MIGRATIONS = Path(__file__).parent / "migrations"


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def upgrade(connection: Connection) -> None:
    """Bring the schema to head, or raise SchemaTooNew if the database is ahead of us."""
    cfg = _config(connection)
    script = ScriptDirectory.from_config(cfg)
    current = MigrationContext.configure(connection).get_current_revision()
    known = {rev.revision for rev in script.walk_revisions()}
    if current is not None and current not in known:
        raise SchemaTooNew(
            f"the database schema is at revision {current!r}, which this parley does not know "
            f"(its newest is {script.get_current_head()!r}); it was migrated by a newer parley. "
            "Upgrade parley, or point it at another database.",
            revision=current,
        )
    command.upgrade(cfg, "head")
