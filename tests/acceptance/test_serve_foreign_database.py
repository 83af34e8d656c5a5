"""``parley serve`` on a database another application made exits 1 with ``error
[foreign_database]`` and adds nothing to it, on either store; given a schema of its own on
PostgreSQL (``PARLEY_DB_SCHEMA``), it serves from the same database."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.cli_support import spawn_hub, wait_ready
from tests.integration.test_store_foreign import ORDERS, an_orders_app, rows, tables

# Another application's tables and a schema of parley's own go into the database.
pytestmark = pytest.mark.fresh_database


async def test_serve_on_another_applications_database_exits_1_with_foreign_database(
    tmp_path: Path, backend: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    url = database_url if backend == "postgres" else f"sqlite:///{home / 'parley.db'}"
    await an_orders_app(url)

    refused = spawn_hub(home, database_url=url)
    try:
        assert refused.proc.wait(60) == 1
    finally:
        refused.stop()
    output = refused.output.until_end(30)
    assert "error [foreign_database]: " in output, output
    assert "'orders'" in output, output
    assert "Traceback" not in output and "running at" not in output, output
    assert await tables(url) == {"orders"}

    if backend != "postgres":
        return
    monkeypatch.setenv("PARLEY_DB_SCHEMA", "parley")
    served = wait_ready(spawn_hub(home, database_url=url))
    try:
        assert await rows(url, "SELECT id, item FROM orders ORDER BY id") == ORDERS
        assert "principals" in await tables(url, "parley")
    finally:
        assert served.stop() == 0
