"""A full disk under the store, for real (a small tmpfs; on PostgreSQL a tablespace on it): a
write that finds no room is refused with ``storage_full`` and nothing of it is stored, every
other write is refused the same way (the writer is not wedged), ``/readyz`` says the storage is
full, and as soon as space returns writes are taken again without a restart, with every write
acknowledged before still there, once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.bootstrap import build_hub
from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from tests.full_disk import SmallDisk, store_on_small_disk

BODY = "Move the release to Thursday; the notes are in the tracker. " * 40  # ~2.4 KB
MAX_SENDS = 2000  # far more than the room a filled disk has left


@pytest.fixture
async def full_disk_hub(
    backend: str, tmp_path: Path
) -> AsyncIterator[tuple[SmallDisk, Hub, Callable[[str | None], httpx.AsyncClient]]]:
    async with store_on_small_disk(backend, tmp_path / "home") as (disk, settings):
        hub = build_hub(settings)
        await hub.start(background=False)
        app = create_app(hub=hub)
        clients: list[httpx.AsyncClient] = []

        def client(token: str | None) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            made = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://parley.test",
                headers=headers,
            )
            clients.append(made)
            return made

        try:
            yield disk, hub, client
        finally:
            for made in clients:
                await made.aclose()
            await hub.stop()


async def send(agent: httpx.AsyncClient, key: str) -> httpx.Response:
    mail = {"to": "bob", "kind": "info", "subject": key, "body": BODY, "idempotency_key": key}
    return await agent.post("/v1/mail", json=mail)


async def inbox(reader: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Bob's whole inbox, page by page."""
    messages: list[dict[str, Any]] = []
    while True:
        params = {"limit": 1000, **({"after_seq": messages[-1]["seq"]} if messages else {})}
        r = await reader.get("/v1/agents/bob/inbox", params=params)
        assert r.status_code == 200, r.text
        if not r.json():
            return messages
        messages.extend(r.json())


def refused_as_full(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 507, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == "storage_full"
    assert "full" in body["message"] and "free space" in body["message"]
    return body


async def test_a_full_disk_refuses_writes_clearly_and_they_resume_when_space_returns(
    full_disk_hub: tuple[SmallDisk, Hub, Callable[[str | None], httpx.AsyncClient]],
) -> None:
    disk, hub, client = full_disk_hub
    op = client(hub.operator_token)
    tokens = {}
    for name in ("alice", "bob"):
        r = await op.post("/v1/agents", json={"id": name})
        assert r.status_code == 201, r.text
        tokens[name] = r.json()["token"]
    alice, bob = client(tokens["alice"]), client(tokens["bob"])
    acknowledged: dict[str, str] = {}  # idempotency key -> message id
    for n in range(5):
        r = await send(alice, f"before-{n}")
        assert r.status_code == 201, r.text
        acknowledged[f"before-{n}"] = r.json()["id"]

    disk.fill()
    refused_key = None
    for n in range(MAX_SENDS):
        r = await send(alice, f"full-{n}")
        if r.status_code == 201:  # room the store had already taken
            acknowledged[f"full-{n}"] = r.json()["id"]
            continue
        refused_as_full(r)
        refused_key = f"full-{n}"
        break
    assert refused_key is not None, "the store never ran out of room"

    # Refused again the same way; any other write either fits in room the store already has
    # or is refused the same way, never by a wedged writer (503 PendingRollbackError).
    refused_as_full(await send(alice, refused_key))
    r = await op.post("/v1/agents", json={"id": "carol"})
    if r.status_code != 201:
        refused_as_full(r)
    ready = await op.get("/readyz")
    assert ready.status_code == 503, ready.text
    assert (ready.json()["status"], ready.json()["storage"]) == ("degraded", "full")
    assert await inbox(op)  # reads still work (the operator's do not mark mail delivered)

    disk.free()
    ready = await op.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert (ready.json()["status"], ready.json()["storage"]) == ("ready", "ok")
    # The refused mail was not stored: sent again, it is new (201), not a replay (200).
    r = await send(alice, refused_key)
    assert r.status_code == 201, r.text
    acknowledged[refused_key] = r.json()["id"]
    r = await op.post("/v1/agents", json={"id": "dave"})
    assert r.status_code == 201, r.text

    stored = await inbox(bob)
    assert sorted(m["id"] for m in stored) == sorted(acknowledged.values())
    assert {m["subject"]: m["id"] for m in stored} == acknowledged
    assert all(m["body"] == BODY for m in stored)
