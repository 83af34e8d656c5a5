"""P3 as a user meets it: ``parley serve`` on a data root whose database a newer parley migrated
exits 1 with the refusal's code and never announces a running hub."""

from __future__ import annotations

from pathlib import Path

from parley.bootstrap import build_hub
from parley.config import Settings
from tests.acceptance.cli_support import spawn_hub
from tests.integration.test_store_schema_too_new import FUTURE_REVISION, stamp_future_revision


async def test_serve_on_a_newer_schema_exits_1_with_schema_too_new(
    tmp_path: Path,
) -> None:
    """On SQLite only (it asks for no backend): the refusal itself is tested on both stores in
    tests/integration."""
    home = tmp_path / "home"
    url = f"sqlite:///{home / 'parley.db'}"
    made = build_hub(Settings(home=home, database_url=url))
    await made.start(background=False)
    await made.stop()
    await stamp_future_revision(url)

    served = spawn_hub(home)
    try:
        assert served.proc.wait(60) == 1
    finally:
        served.stop()
    output = served.output.until_end(30)
    assert "error [schema_too_new]" in output
    assert repr(FUTURE_REVISION) in output
    assert "running at" not in output
