"""Mailroom export and import do their formatting and parsing in a worker thread: the hub keeps
answering (``/healthz``) while a big export or import is under way."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from parley.core import mailroom
from parley.service.hub import Hub
from tests.conftest import MakeAgent
from tests.integration.mail_support import send

Api = Callable[[str | None], httpx.AsyncClient]
# Only a safety net: on the event loop's own thread the held work would freeze the hub, and the
# test must fail (on the thread check) rather than hang.
HOLD_LIMIT_S = 5.0


class Held:
    """Wraps a mailroom function so that it runs only once the test lets it, recording the
    thread it ran on."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.loop = asyncio.get_running_loop()
        self.entered = asyncio.Event()
        self.release = threading.Event()
        self.threads: list[int] = []

    def __call__(self, *args: Any) -> Any:
        self.threads.append(threading.get_ident())
        self.loop.call_soon_threadsafe(self.entered.set)
        self.release.wait(HOLD_LIMIT_S)
        return self.real(*args)


async def answers_health_while_held(client: httpx.AsyncClient, held: Held, work: Any) -> Any:
    task = asyncio.ensure_future(work)
    await held.entered.wait()
    health = await client.get("/healthz")
    assert health.status_code == 200
    assert not task.done()
    held.release.set()
    result = await task
    assert held.threads and held.threads[0] != threading.get_ident()
    return result


async def test_an_export_formats_files_off_the_event_loop(
    hub: Hub, make_agent: MakeAgent, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    for i in range(5):
        await send(hub, alice.principal, "bob", body=f"{i}" + "y" * 200_000)
    held = Held(mailroom.export_files)
    monkeypatch.setattr(mailroom, "export_files", held)
    assert hub.operator_token is not None
    client = api(hub.operator_token)
    r = await answers_health_while_held(client, held, client.get("/v1/mailroom/export"))
    assert r.status_code == 200
    assert len(r.json()["files"]) == 5


async def test_an_import_parses_files_off_the_event_loop(
    hub: Hub, make_agent: MakeAgent, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = await make_agent("alice")
    await make_agent("bob")
    await send(hub, alice.principal, "bob", body="to carry over")
    assert hub.operator_token is not None
    client = api(hub.operator_token)
    files = (await client.get("/v1/mailroom/export")).json()["files"]
    held = Held(mailroom.parse_files)
    monkeypatch.setattr(mailroom, "parse_files", held)
    r = await answers_health_while_held(
        client, held, client.post("/v1/mailroom/import", json={"files": files})
    )
    assert r.status_code == 200, r.text
    assert r.json()["skipped"] == 1


def test_quoting_a_large_value_gives_the_same_text_as_before() -> None:
    value = 'a"b\\c\nd\te\x01\x85\u2028\U0001f600 ' * 3
    expected = '"' + 'a\\"b\\\\c\\nd\\te\\x01\\x85\\u2028\U0001f600 ' * 3 + '"'
    assert mailroom._scalar(value) == expected
