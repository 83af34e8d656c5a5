"""The web UI's sign-in bounds over plain HTTP: a principal holds a few sessions (its own oldest
is closed for a new one), signs in a few times a minute, and no sign-in ever signs another
principal out, not even when the hub's sessions are full."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from parley.config import Settings
from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from tests.conftest import MakeAgent

BASE = "http://parley.test"
ORIGIN = {"Origin": BASE}
PER_PRINCIPAL = 2
MAX_SESSIONS = 4
SIGNINS_PER_MINUTE = 6


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "ui_sessions_per_principal": PER_PRINCIPAL,
            "ui_sessions_max": MAX_SESSIONS,
            "ui_signins_per_minute": SIGNINS_PER_MINUTE,
        }
    )


class Browsers:
    """Fresh browsers (cookie jars) of one app."""

    def __init__(self, hub: Hub) -> None:
        self.transport = httpx.ASGITransport(app=create_app(hub=hub))
        self.opened: list[httpx.AsyncClient] = []

    def new(self) -> httpx.AsyncClient:
        client = httpx.AsyncClient(transport=self.transport, base_url=BASE)
        self.opened.append(client)
        return client


@pytest.fixture
async def browsers(hub: Hub) -> AsyncIterator[Browsers]:
    found = Browsers(hub)
    yield found
    for client in found.opened:
        await client.aclose()


async def sign_in(browser: httpx.AsyncClient, token: str) -> httpx.Response:
    return await browser.post("/ui/signin", data={"token": token}, headers=ORIGIN)


async def signed_in(browser: httpx.AsyncClient) -> bool:
    r = await browser.get("/ui/")
    assert r.status_code in (200, 303)
    return r.status_code == 200


async def test_an_agent_signing_in_again_and_again_never_signs_the_operator_out(
    hub: Hub, browsers: Browsers, make_agent: MakeAgent
) -> None:
    assert hub.operator_token is not None
    agent = await make_agent("mallory")
    operator = browsers.new()
    assert (await sign_in(operator, hub.operator_token)).status_code == 303
    # The agent signs in as often as it may: each new session closes its own oldest.
    agents = [browsers.new() for _ in range(SIGNINS_PER_MINUTE)]
    for browser in agents:
        assert (await sign_in(browser, agent.token)).status_code == 303
    assert await signed_in(operator)
    assert [await signed_in(b) for b in agents] == [False] * (len(agents) - 2) + [True, True]


async def test_a_full_hub_refuses_a_sign_in_instead_of_signing_anyone_out(
    hub: Hub, browsers: Browsers, make_agent: MakeAgent
) -> None:
    assert hub.operator_token is not None
    operator = [browsers.new() for _ in range(PER_PRINCIPAL)]
    for browser in operator:
        assert (await sign_in(browser, hub.operator_token)).status_code == 303
    holders = []
    for name in ("a1", "a2"):
        agent = await make_agent(name)
        holders.append(browsers.new())
        assert (await sign_in(holders[-1], agent.token)).status_code == 303
    late = await make_agent("late")
    r = await sign_in(browsers.new(), late.token)
    assert r.status_code == 429
    assert "ui_sessions_full" in r.text and "PARLEY_UI_SESSIONS_MAX" in r.text
    assert int(r.headers["retry-after"]) >= 1
    assert "parley_session" not in r.headers.get("set-cookie", "")
    assert all([await signed_in(b) for b in [*operator, *holders]])
    # A principal holding as many sessions as it may still signs in: its own oldest makes room.
    again = browsers.new()
    assert (await sign_in(again, hub.operator_token)).status_code == 303
    assert [await signed_in(b) for b in [*operator, again, *holders]] == [False] + [True] * 4


async def test_sign_in_is_rate_limited_per_principal(
    hub: Hub, browsers: Browsers, make_agent: MakeAgent
) -> None:
    assert hub.operator_token is not None
    agent = await make_agent("mallory")
    browser = browsers.new()
    for _ in range(SIGNINS_PER_MINUTE):
        assert (await sign_in(browser, agent.token)).status_code == 303
    r = await sign_in(browser, agent.token)
    assert r.status_code == 429
    assert "signin_rate_limited" in r.text and "PARLEY_UI_SIGNINS_PER_MINUTE" in r.text
    assert 1 <= int(r.headers["retry-after"]) <= 60
    # The refused sign-in left the browser's session alone, and others sign in meanwhile.
    assert await signed_in(browser)
    assert (await sign_in(browsers.new(), hub.operator_token)).status_code == 303
