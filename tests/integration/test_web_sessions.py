"""The web UI's sign-in, session and CSRF rules, over plain HTTP (the browser tests are in
tests/acceptance/test_web_ui.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi.routing import APIRoute

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import hash_token
from parley.core.redact import redact_text
from parley.core.runtime import NO_REPLY, Turn
from parley.service.conversations.channels import ChannelSpec
from parley.service.hub import Hub
from parley.service.identity import HumanSpec
from parley.service.meetings.rooms import RoomSpec
from parley.surfaces.rest.app import create_app
from parley.surfaces.web import app as web_app
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import Gate, within

BASE = "http://parley.test"
ORIGIN = {"Origin": BASE}


@pytest.fixture
async def app_client(hub: Hub) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(hub=hub)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as c:
        c.app = app  # type: ignore[attr-defined]
        yield c


async def sign_in(client: httpx.AsyncClient, token: str) -> str:
    """Sign in; returns the CSRF token of the overview page."""
    r = await client.post("/ui/signin", data={"token": token}, headers=ORIGIN)
    assert r.status_code == 303, r.text
    r = await client.get("/ui/")
    assert r.status_code == 200, r.text
    found = re.search(r'name="csrf" value="([^"]+)"', r.text)
    assert found is not None
    return found.group(1)


async def sign_in_operator(client: httpx.AsyncClient, hub: Hub) -> str:
    """Sign in as the hub's operator; returns the CSRF token of the overview page."""
    assert hub.operator_token is not None
    return await sign_in(client, hub.operator_token)


async def test_root_redirects_to_the_ui_and_pages_need_a_session(
    app_client: httpx.AsyncClient,
) -> None:
    r = await app_client.get("/")
    assert r.status_code == 307 and r.headers["location"] == "/ui/"
    r = await app_client.get("/ui/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/signin"
    r = await app_client.get("/ui/signin")
    assert r.status_code == 200 and 'name="token"' in r.text
    # No other site may frame the UI, run scripts in it or cache what it shows.
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["cache-control"] == "no-store"


async def test_a_wrong_token_is_refused_with_its_code(app_client: httpx.AsyncClient) -> None:
    r = await app_client.post("/ui/signin", data={"token": "pt_nope"}, headers=ORIGIN)
    assert r.status_code == 401
    assert "invalid_token" in r.text
    # Said in the form's words: a person pasting a token sends no HTTP header.
    assert "Paste a current one" in r.text and "Authorization" not in r.text
    assert "parley_session" not in r.headers.get("set-cookie", "")
    r = await app_client.post("/ui/signin", data={"token": " "}, headers=ORIGIN)
    assert r.status_code == 401 and "missing_token" in r.text
    assert "paste your parley token" in r.text and "Authorization" not in r.text


async def test_session_cookie_flags_and_no_token_stored(
    app_client: httpx.AsyncClient, hub: Hub
) -> None:
    assert hub.operator_token is not None
    r = await app_client.post("/ui/signin", data={"token": hub.operator_token}, headers=ORIGIN)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("parley_session=")
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/ui"} <= flags
    assert "secure" not in flags  # served over plain http here; https adds it
    assert hub.operator_token not in cookie
    session_id = cookie.split(";")[0].split("=", 1)[1]
    sessions = app_client.app.state.web_sessions  # type: ignore[attr-defined]
    # The hub keeps the session id's hash and the token's digest, never either secret.
    kept = repr(sessions._sessions)
    assert session_id not in kept and hub.operator_token not in kept
    assert hash_token(hub.operator_token) in kept


async def test_secure_flag_over_https(hub: Hub) -> None:
    app = create_app(hub=hub)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://parley.test") as c:
        assert hub.operator_token is not None
        r = await c.post(
            "/ui/signin",
            data={"token": hub.operator_token},
            headers={"Origin": "https://parley.test"},
        )
    assert r.status_code == 303
    assert "secure" in {p.strip().lower() for p in r.headers["set-cookie"].split(";")}


async def test_sign_in_from_another_origin_is_refused(
    app_client: httpx.AsyncClient, hub: Hub
) -> None:
    assert hub.operator_token is not None
    r = await app_client.post(
        "/ui/signin", data={"token": hub.operator_token}, headers={"Origin": "http://evil.test"}
    )
    assert r.status_code == 403
    assert "set-cookie" not in r.headers


async def test_actions_need_the_csrf_token_and_the_own_origin(
    app_client: httpx.AsyncClient, hub: Hub, make_agent: MakeAgent
) -> None:
    agent = await make_agent("alpha")
    csrf = await sign_in_operator(app_client, hub)
    channel = agent.principal.work_channel_id
    path = f"/ui/channels/{channel}/post"
    # No CSRF token, a wrong one, a foreign origin, no origin at all: each refused, none posted.
    for data, headers in (
        ({"content": "a"}, ORIGIN),
        ({"content": "b", "csrf": csrf + "x"}, ORIGIN),
        ({"content": "c", "csrf": csrf}, {"Origin": "http://evil.test"}),
        ({"content": "d", "csrf": csrf}, {}),
    ):
        r = await app_client.post(path, data=data, headers=headers)
        assert r.status_code == 403, (data, headers)
    api = app_client
    r = await api.get(
        f"/v1/channels/{channel}/messages",
        headers={"Authorization": f"Bearer {hub.operator_token}"},
    )
    assert r.json() == []
    # With both, the post goes through the channel service as the operator.
    r = await app_client.post(path, data={"content": "hello", "csrf": csrf}, headers=ORIGIN)
    assert r.status_code == 303
    r = await api.get(
        f"/v1/channels/{channel}/messages",
        headers={"Authorization": f"Bearer {hub.operator_token}"},
    )
    assert [(m["sender_id"], m["content"]) for m in r.json()] == [("operator", "hello")]
    # A Referer from the hub's own pages is accepted when a client sends no Origin.
    r = await app_client.post(
        path, data={"content": "again", "csrf": csrf}, headers={"Referer": f"{BASE}/ui/"}
    )
    assert r.status_code == 303


async def test_a_rotated_token_ends_its_sessions(
    app_client: httpx.AsyncClient, hub: Hub, make_agent: MakeAgent
) -> None:
    operator = await hub.identity.authenticate(hub.operator_token)
    human = await hub.identity.create_human(operator, HumanSpec(id="hana"))
    await sign_in(app_client, human.token)
    assert (await app_client.get("/ui/channels")).status_code == 200
    await hub.identity.issue_token(operator, "hana", rotate=True)
    r = await app_client.get("/ui/channels")
    # Signed out, with the way back to the page asked for.
    assert r.status_code == 303 and r.headers["location"] == "/ui/signin?next=%2Fui%2Fchannels"
    sessions = app_client.app.state.web_sessions  # type: ignore[attr-defined]
    assert sessions._sessions == {}


async def test_sign_out_ends_the_session(app_client: httpx.AsyncClient, hub: Hub) -> None:
    csrf = await sign_in_operator(app_client, hub)
    r = await app_client.post("/ui/signout", data={"csrf": csrf}, headers=ORIGIN)
    assert r.status_code == 303
    r = await app_client.get("/ui/")
    assert r.status_code == 303


async def test_one_time_sign_in_link_works_once(app_client: httpx.AsyncClient, hub: Hub) -> None:
    assert hub.operator_token is not None
    sessions = app_client.app.state.web_sessions  # type: ignore[attr-defined]
    code = sessions.issue_code(hash_token(hub.operator_token))
    assert hub.operator_token not in code
    r = await app_client.get(f"/ui/signin/link?key={code}")
    assert r.status_code == 303
    assert (await app_client.get("/ui/")).status_code == 200
    app_client.cookies.clear()
    r = await app_client.get(f"/ui/signin/link?key={code}")
    assert r.status_code == 401 and "used already or has expired" in r.text
    assert (await app_client.get("/ui/")).status_code == 303
    # An access log line with the link does not carry the code (the hub's log redaction).
    assert code not in redact_text(f'"GET /ui/signin/link?key={code} HTTP/1.1" 303')


async def test_an_agent_cannot_read_another_agents_inbox_or_channel(
    app_client: httpx.AsyncClient, make_agent: MakeAgent
) -> None:
    alpha = await make_agent("alpha")
    beta = await make_agent("beta")
    csrf = await sign_in(app_client, alpha.token)
    r = await app_client.get("/ui/mail?owner=beta")
    assert r.status_code == 403 and "Refused (" in r.text
    r = await app_client.get(f"/ui/channels/{beta.principal.work_channel_id}")
    assert r.status_code == 403 and "channel_forbidden" in r.text
    r = await app_client.post(
        f"/ui/channels/{beta.principal.work_channel_id}/post",
        data={"content": "sneaky", "csrf": csrf},
        headers=ORIGIN,
    )
    assert r.status_code == 303
    r = await app_client.get("/ui/")
    assert "not_a_member" in r.text  # the refusal is shown on the next page
    r = await app_client.get("/ui/events")
    assert r.status_code == 403 and "operator_only" in r.text


async def test_ui_routes_stay_out_of_the_api_document(app_client: httpx.AsyncClient) -> None:
    paths = (await app_client.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith("/ui")]


async def test_bad_form_input_is_refused_with_a_code_and_nothing_is_stored(
    app_client: httpx.AsyncClient, hub: Hub, make_agent: MakeAgent
) -> None:
    agent = await make_agent("alpha")
    csrf = await sign_in_operator(app_client, hub)
    operator = await hub.identity.authenticate(hub.operator_token)
    room = await hub.rooms.create(operator, RoomSpec(name="sync"))
    channel = agent.principal.work_channel_id
    for path, data, code in (
        (f"/ui/channels/{channel}/post", {"content": "a\x00b"}, "invalid_text"),
        (f"/ui/channels/{channel}/post", {"content": "   "}, "empty_message"),
        ("/ui/meetings/convene", {"room_id": room.id, "topic": ""}, "validation_error"),
        ("/ui/meetings/convene", {"room_id": room.id, "topic": "t" * 2001}, "validation_error"),
        ("/ui/meetings/convene", {"room_id": "nope", "topic": "t"}, "room_not_found"),
        ("/ui/workers/start", {"agent_id": "alpha", "prompt": ""}, "validation_error"),
        ("/ui/workers/nope/takeover", {"instruction": "x"}, "worker_not_found"),
    ):
        r = await app_client.post(path, data={**data, "csrf": csrf}, headers=ORIGIN)
        assert r.status_code == 303, (path, r.text)
        shown = await app_client.get(r.headers["location"])
        assert f"Refused ({code})" in shown.text, (path, data)
    # A cancel reason longer than REST allows is refused (by the service, for every surface)
    # before any worker is looked up.
    r = await app_client.post(
        "/ui/workers/nope/cancel", data={"reason": "r" * 201, "csrf": csrf}, headers=ORIGIN
    )
    assert r.status_code == 303
    assert "Refused (validation_error)" in (await app_client.get("/ui/workers")).text
    assert await hub.channels.messages(operator, channel) == []
    assert await hub.meetings.of_room(operator, room.id) == []
    assert await hub.workers.listing(operator) == []


async def test_cancel_a_task_and_force_close_a_discussion_from_the_ui(
    app_client: httpx.AsyncClient, hub: Hub, make_agent: MakeAgent, runtimes: StaticRuntimes
) -> None:
    gate = Gate()

    async def held(turn: Turn) -> str:
        await gate.wait()
        return "never said"

    runtimes.set("alpha", ScriptedRuntime(held))
    runtimes.set("beta", ScriptedRuntime(lambda turn: NO_REPLY))
    alpha = await make_agent("alpha", runtime={"kind": "scripted"})
    beta = await make_agent("beta", runtime={"kind": "scripted"}, accepts_channels_from=["alpha"])
    assert hub.operator_token is not None
    operator = await hub.identity.authenticate(hub.operator_token)
    group = await hub.channels.create(operator, ChannelSpec(name="g", members=["alpha", "beta"]))
    posted = await hub.channels.post(operator, group.id, "start")
    await within(gate.entered.wait(), "alpha's turn")
    csrf = await sign_in(app_client, hub.operator_token)
    r = await app_client.post(
        f"/ui/tasks/{posted.task_id}/cancel", data={"csrf": csrf}, headers=ORIGIN
    )
    assert r.status_code == 303 and r.headers["location"] == f"/ui/channels/{group.id}"
    task = await hub.tasks.get(operator, posted.task_id or "")
    assert (task.status, task.end_reason) == ("finished", "cancelled")

    gate.release.set()
    discussion = await hub.discussions.create_private_channel(
        alpha.principal, "d", ["beta"], alpha.principal.work_channel_id, "decide"
    )
    await hub.tasks.wait_idle()
    # An agent's session is refused by the discussion service; the operator's closes it.
    app_client.cookies.clear()
    beta_csrf = await sign_in(app_client, beta.token)
    path = f"/ui/channels/{discussion.id}/close"
    r = await app_client.post(path, data={"csrf": beta_csrf, "reason": "x"}, headers=ORIGIN)
    assert "Refused (operator_only)" in (await app_client.get(r.headers["location"])).text
    assert (await hub.channels.get(operator, discussion.id)).status == "active"
    app_client.cookies.clear()
    csrf = await sign_in(app_client, hub.operator_token)
    r = await app_client.post(path, data={"csrf": csrf, "reason": "stuck"}, headers=ORIGIN)
    assert "Discussion closed." in (await app_client.get(r.headers["location"])).text
    assert (await hub.channels.get(operator, discussion.id)).status == "closed"


async def test_every_action_needs_the_csrf_token(app_client: httpx.AsyncClient, hub: Hub) -> None:
    """Walks every state-changing route of the UI: without the session's CSRF token each is
    refused before it reaches a service (sign-in, which has no session yet, checks the origin)."""
    await sign_in_operator(app_client, hub)
    actions = [
        route.path
        for area in web_app.AREAS
        for route in area.router.routes
        if isinstance(route, APIRoute) and "POST" in route.methods and route.path != "/signin"
    ]
    assert len(actions) >= 10
    for path in actions:
        concrete = re.sub(r"\{[a-z_]+\}", "x", path)
        r = await app_client.post(f"/ui{concrete}", data={"content": "x"}, headers=ORIGIN)
        assert r.status_code == 403 and "CSRF" in r.text, path


async def test_a_sign_in_goes_back_only_to_a_page_of_this_ui(
    app_client: httpx.AsyncClient, hub: Hub
) -> None:
    assert hub.operator_token is not None
    r = await app_client.get("/ui/workers?after=w-1")
    assert r.headers["location"] == "/ui/signin?next=%2Fui%2Fworkers%3Fafter%3Dw-1"
    form = await app_client.get("/ui/signin?next=%2Fui%2Fworkers%3Fafter%3Dw-1")
    assert 'name="next" value="/ui/workers?after=w-1"' in form.text
    for wanted, lands in (
        ("/ui/workers?after=w-1", "/ui/workers?after=w-1"),
        ("//evil.test/ui/", "/ui/"),
        ("https://evil.test/ui/x", "/ui/"),
        ("/ui/\\\\evil.test", "/ui/"),
        ("/ui/signin", "/ui/"),
        ("/v1/agents", "/ui/"),
    ):
        r = await app_client.post(
            "/ui/signin", data={"token": hub.operator_token, "next": wanted}, headers=ORIGIN
        )
        assert (r.status_code, r.headers["location"]) == (303, lands), wanted


async def test_an_unknown_page_is_an_html_404_and_the_icon_needs_no_session(
    app_client: httpx.AsyncClient, hub: Hub
) -> None:
    assert (await app_client.get("/favicon.ico")).headers["content-type"] == "image/svg+xml"
    await sign_in_operator(app_client, hub)
    r = await app_client.get("/ui/nothing/here")
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "There is no page at" in r.text


async def test_the_shared_stream_carries_only_live_pages_of_this_ui(
    app_client: httpx.AsyncClient, hub: Hub
) -> None:
    await sign_in_operator(app_client, hub)
    for foreign in ("https://evil.test/ui/x/live", "/v1/agents", "/ui/live", "/ui/channels"):
        r = await app_client.get("/ui/live", params={"u": foreign})
        assert r.status_code == 400 and "invalid_request" in r.text, foreign
