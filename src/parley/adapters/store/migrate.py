"""Run Alembic migrations on start, refusing a database whose schema is newer than this code, and
one that another application made (``check_ours``).

A database is parley's when it is empty (parley then creates its tables), or when it holds
Alembic's version table and the tables parley has had since its first migration. Anything else
is another application's: parley does not add its tables beside them. On PostgreSQL "the
database" is the schema parley uses (``PARLEY_DB_SCHEMA``, or the first of the URL's
``search_path``), which is how parley shares a database with other applications.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from parley.core.errors import ForeignDatabase, SchemaTooNew

MIGRATIONS = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"
PARLEY_TABLES = frozenset({"principals", "tokens", "messages", "channels", "events"})
"""Tables every parley database has had since its first migration (0001)."""
SHOWN = 5


def check_ours(tables: set[str], where: str, advice: str) -> None:
    """Raise ForeignDatabase unless ``tables`` (the tables and views the database holds) are
    none, or parley's own; ``advice`` says where else parley may go."""
    if not tables or (VERSION_TABLE in tables and tables >= PARLEY_TABLES):
        return
    names = sorted(tables)
    shown = ", ".join(repr(n) for n in names[:SHOWN])
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    raise ForeignDatabase(
        f"{where} holds tables parley did not create ({shown}{more}): it belongs to another "
        f"application, and parley does not add its tables beside another's. {advice}",
        tables=names[:SHOWN],
    )


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
