"""Rotating the operator's tokens keeps the CLI working: the hub rewrites the operator token file
(0600) with the new token. ``rotate`` must be a real boolean."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from parley.config import Settings, operator_token_path
from parley.service.hub import Hub
from tests.conftest import MakeAgent

Api = Callable[[str | None], httpx.AsyncClient]


def token_file(settings: Settings) -> Path:
    return operator_token_path(settings.data_root())


async def test_rotating_the_operator_rewrites_its_token_file(
    hub: Hub, api: Api, settings: Settings
) -> None:
    old = hub.operator_token
    assert old is not None
    response = await api(old).post("/v1/principals/operator/tokens", json={"rotate": True})
    assert response.status_code == 201, response.text
    new = response.json()["token"]
    path = token_file(settings)
    assert path.read_text().strip() == new
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (await api(new).get("/v1/whoami")).json()["id"] == "operator"
    refused = await api(old).get("/v1/whoami")
    assert refused.status_code == 401
    # No temporary file is left beside it.
    assert [p.name for p in path.parent.iterdir() if "operator.token" in p.name] == [
        "operator.token"
    ]


async def test_other_rotations_leave_the_operator_token_file_alone(
    hub: Hub, api: Api, settings: Settings, make_agent: MakeAgent
) -> None:
    await make_agent("alice")
    operator = api(hub.operator_token)
    path = token_file(settings)
    path.write_text(f"{hub.operator_token}\n")
    for principal, rotate in (("alice", True), ("operator", False)):
        response = await operator.post(
            f"/v1/principals/{principal}/tokens", json={"rotate": rotate}
        )
        assert response.status_code == 201, response.text
    assert path.read_text().strip() == hub.operator_token
    assert (await operator.get("/v1/whoami")).status_code == 200


@pytest.mark.parametrize("rotate", [0, 1, "true", "yes", None])
async def test_rotate_must_be_a_boolean(hub: Hub, api: Api, rotate: object) -> None:
    operator = api(hub.operator_token)
    response = await operator.post("/v1/principals/operator/tokens", json={"rotate": rotate})
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "validation_error"
    assert (await operator.get("/v1/whoami")).status_code == 200
