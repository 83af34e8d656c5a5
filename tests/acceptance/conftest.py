"""Fixtures of the acceptance tests. Here ``hub`` is a real ``parley serve`` subprocess on the
backend under test (not the in-process hub of the integration tests), and ``cli`` runs the real
``parley`` command against it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.cli_support import Cli, ServedHub, served_hub


@pytest.fixture
def hub(tmp_path: Path, backend: str, database_url: str) -> Iterator[ServedHub]:
    with served_hub(
        tmp_path / "home", database_url=database_url if backend == "postgres" else None
    ) as served:
        yield served


@pytest.fixture
def cli(hub: ServedHub) -> Cli:
    return Cli(hub.home)
