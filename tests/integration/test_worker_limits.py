"""How far one principal may grow a worker tree, and what a tree shows: starting and spawning
count against the send quota (messages and the bytes they store), a child deeper than the depth
limit and a child more than the fan-out limit are refused with their own codes, a tree made
deeper before the limit still reads (REST, MCP, the web UI) and its root's creator still controls
all of it, a tree shows only the workers the caller may see, and acting on a worker one may not
see is refused as reading it is. REST and MCP alike; the agents have no runtime, so their
workers wait (pending) instead of running and finishing."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from mcp import Client

from parley.config import Settings
from parley.core import workers as wk
from parley.core.channels import LogicalSession
from parley.core.identity import Principal
from parley.core.ports import Tx
from parley.core.workers import Worker
from parley.service.hub import Hub
from parley.surfaces.mcp import build_mcp
from parley.surfaces.rest.app import create_app
from parley.testing import FakeClock
from tests.conftest import AgentHandle, MakeAgent
from tests.integration.mcp_support import data, refusal

Api = Callable[[str | None], httpx.AsyncClient]
Connect = Callable[[str], AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect(hub: Hub) -> Connect:
    """An in-memory MCP session of the ``workers`` profile as the holder of ``token``."""

    @asynccontextmanager
    async def open_session(token: str) -> AsyncIterator[Client]:
        async with Client(build_mcp(hub, "workers", token=token)) as client:
            yield client

    return open_session


async def idle_agent(make_agent: MakeAgent, name: str, *accepts: str) -> AgentHandle:
    """An agent without a runtime: its workers wait, pending, and never finish on their own."""
    return await make_agent(name, runtime={"kind": "none"}, accepts_channels_from=list(accepts))


def refused(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["code"]


async def spawn(client: httpx.AsyncClient, parent_id: str, prompt: str = "x") -> httpx.Response:
    return await client.post(f"/v1/workers/{parent_id}/spawn", json={"prompt": prompt})


async def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def worker_count(hub: Hub) -> int:
    async with hub.store.read() as tx:
        return len(await tx.select("workers"))


def test_the_limits_are_ones_a_real_tree_never_meets() -> None:
    fields = Settings.model_fields
    assert fields["worker_max_depth"].default == 8
    assert fields["worker_max_children"].default == 64


# -- depth and fan-out -----------------------------------------------------------------------------
@pytest.fixture
def small_tree(settings: Settings) -> Settings:
    settings.worker_max_depth = 2
    settings.worker_max_children = 2
    return settings


async def test_a_child_deeper_than_the_limit_is_refused_on_every_surface(
    small_tree: Settings, hub: Hub, make_agent: MakeAgent, api: Api, connect: Connect
) -> None:
    lead = await idle_agent(make_agent, "lead")
    client = api(lead.token)
    root = await created(await client.post("/v1/workers", json={"prompt": "plan"}))
    first = await created(await spawn(client, root["id"]))
    second = await created(await spawn(client, first["id"]))
    before = await worker_count(hub)

    r = await spawn(client, second["id"])
    assert refused(r) == (409, "worker_too_deep")
    assert "more than 2 levels below its root" in r.json()["message"]
    assert r.json()["details"] == {"worker_id": second["id"], "limit": 2}
    async with connect(lead.token) as mcp:
        args = {"prompt": "deeper", "parent_worker_id": second["id"]}
        assert refusal(await mcp.call_tool("spawn_child", args))["code"] == "worker_too_deep"
    # The operator is held to it as well: the limit is the tree's, not the caller's.
    op = api(hub.operator_token)
    assert refused(await spawn(op, second["id"])) == (409, "worker_too_deep")
    assert await worker_count(hub) == before
    # A sibling at the deepest level allowed is not refused.
    await created(await spawn(client, first["id"]))


async def test_a_parent_with_the_most_unfinished_children_refuses_another_until_one_ends(
    small_tree: Settings, hub: Hub, make_agent: MakeAgent, api: Api, connect: Connect
) -> None:
    lead = await idle_agent(make_agent, "lead")
    client, op = api(lead.token), api(hub.operator_token)
    root = await created(await client.post("/v1/workers", json={"prompt": "plan"}))
    first = await created(await spawn(client, root["id"]))
    await created(await spawn(client, root["id"]))

    r = await spawn(client, root["id"])
    assert refused(r) == (409, "worker_too_many_children")
    assert "has 2 unfinished children" in r.json()["message"]
    assert r.json()["details"] == {"worker_id": root["id"], "limit": 2}
    assert refused(await spawn(op, root["id"])) == (409, "worker_too_many_children")
    async with connect(lead.token) as mcp:
        args = {"prompt": "one more", "parent_worker_id": root["id"]}
        code = refusal(await mcp.call_tool("spawn_child", args))["code"]
        assert code == "worker_too_many_children"
    # Finished children do not count: once one reports, there is room for another.
    r = await client.post(f"/v1/workers/{first['id']}/result", json={"summary": "done"})
    assert r.status_code == 200, r.text
    await created(await spawn(client, root["id"]))
    assert refused(await spawn(client, root["id"])) == (409, "worker_too_many_children")


# -- the send quota --------------------------------------------------------------------------------
RATE = 3
BYTES = 60_000


@pytest.fixture
def quota(settings: Settings) -> Settings:
    settings.send_rate_per_minute = RATE
    settings.send_bytes_per_minute = BYTES
    return settings


async def test_starting_and_spawning_count_against_the_send_quota(
    quota: Settings, hub: Hub, make_agent: MakeAgent, api: Api, connect: Connect, clock: FakeClock
) -> None:
    lead = await idle_agent(make_agent, "lead")
    await idle_agent(make_agent, "bob")
    client = api(lead.token)
    root = await created(await client.post("/v1/workers", json={"prompt": "plan"}))
    await created(await spawn(client, root["id"]))
    await created(await spawn(client, root["id"]))
    before = await worker_count(hub)

    r = await spawn(client, root["id"])
    assert refused(r) == (429, "quota_exceeded")
    assert f"{RATE} messages a minute" in r.json()["message"]
    assert "Retry-After" in r.headers
    r = await client.post("/v1/workers", json={"prompt": "another"})
    assert refused(r) == (429, "quota_exceeded")
    async with connect(lead.token) as mcp:
        args = {"prompt": "x", "parent_worker_id": root["id"]}
        assert refusal(await mcp.call_tool("spawn_child", args))["code"] == "quota_exceeded"
    # One quota for everything a sender stores: mail is refused too.
    r = await client.post("/v1/mail", json={"to": "bob", "kind": "task", "body": "hi"})
    assert refused(r) == (429, "quota_exceeded")
    assert await worker_count(hub) == before
    # The operator is not limited; the agent is again once the minute has passed.
    await created(await spawn(api(hub.operator_token), root["id"]))
    clock.advance(60)
    await created(await spawn(client, root["id"]))


async def test_a_spawn_is_charged_every_copy_of_the_prompt_it_stores(
    quota: Settings, hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    lead = await idle_agent(make_agent, "lead")
    client = api(lead.token)
    root = await created(await client.post("/v1/workers", json={"prompt": "plan"}))
    # A spawn stores its prompt three times (the dispatch mail's body and payload, and the
    # child's first turn): 10 kB of prompt costs over 30 kB, so a second does not fit in 60 kB.
    await created(await spawn(client, root["id"], "p" * 10_000))
    r = await spawn(client, root["id"], "q" * 10_000)
    assert refused(r) == (429, "quota_exceeded")
    assert f"{BYTES:,} bytes a minute" in r.json()["message"]
    # One that stores more than the whole minute's bytes is refused as too large.
    r = await spawn(client, root["id"], "r" * 25_000)
    assert refused(r) == (413, "send_over_quota")
    assert r.json()["details"]["limit"] == BYTES
    assert r.json()["details"]["size"] > 3 * 25_000


async def test_a_start_or_spawn_that_stores_nothing_gives_its_charge_back(
    quota: Settings, hub: Hub, make_agent: MakeAgent, api: Api
) -> None:
    hub.settings.message_max_bytes = 30_000
    lead = await idle_agent(make_agent, "lead")
    client = api(lead.token)
    root = await created(await client.post("/v1/workers", json={"prompt": "plan"}))
    # Refused after it was charged: the turn's text, or the dispatch, is over the message size.
    for _ in range(RATE + 1):
        r = await client.post("/v1/workers", json={"prompt": "s" * 40_000})
        assert refused(r) == (413, "message_too_large")
        # ~51 kB charged, within the minute's bytes; its dispatch mail (~34 kB) is too large.
        r = await spawn(client, root["id"], "t" * 17_000)
        assert refused(r) == (413, "message_too_large")
    await created(await spawn(client, root["id"]))
    await created(await client.post("/v1/workers", json={"prompt": "again"}))


# -- a tree deeper than the limit, made before it --------------------------------------------------
DEEP = 400


async def deep_chain(hub: Hub, root: Worker, agent_id: str) -> list[Worker]:
    """``DEEP`` workers below ``root``, one under the other, each spawned by the one above's
    agent, written straight to the store as a hub without a depth limit would have."""
    chain: list[Worker] = []

    async def job(tx: Tx) -> None:
        parent = root
        for i in range(DEEP):
            at = root.created + timedelta(seconds=i + 1)
            session = LogicalSession(
                id=f"vs-deep-{i:03}",
                agent_id=agent_id,
                channel_id=f"c-deep-{i:03}",
                display_name=f"deep {i}",
                created=at,
                parent_logical_id=parent.session_id,
                spawned_by_worker_id=parent.id,
            )
            worker = Worker(
                id=f"w-deep-{i:03}",
                agent_id=agent_id,
                session_id=session.id,
                channel_id=session.channel_id,
                state="idle",
                parent_worker_id=parent.id,
                trace_id=root.trace_id,
                created_by=parent.agent_id,
                created=at,
                updated=at,
                last_heartbeat=at,
            )
            tx.insert("sessions", session)
            tx.insert("workers", worker)
            chain.append(worker)
            parent = worker

    await hub.store.write(job)
    return chain


def nesting(nodes: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """How deep a tree answer nests (1: roots only) and the ids in it, without recursion."""
    ids = [n["id"] for n, _ in wk.walk(nodes)]
    return max(level + 1 for _, level in wk.walk(nodes)), ids


def list_depths(html: str) -> tuple[int, int]:
    """How deep the lists of a page's drawn tree nest, and how many are left open at its end."""
    tree = html[html.index('<ul class="tree"') : html.index("<h2>Takeovers")]
    depth = deepest = 0
    for tag in re.findall(r"</?ul\b", tree):
        depth += -1 if tag.startswith("</") else 1
        deepest = max(deepest, depth)
    return deepest, depth


async def test_a_tree_made_deeper_than_the_limit_still_reads_and_its_creator_controls_it_all(
    hub: Hub, make_agent: MakeAgent, api: Api, connect: Connect
) -> None:
    lead = await idle_agent(make_agent, "lead")
    await idle_agent(make_agent, "helper")
    client = api(lead.token)
    root = Worker.model_validate(
        await created(await client.post("/v1/workers", json={"prompt": "plan"}))
    )
    chain = await deep_chain(hub, root, "helper")
    deepest = chain[-1]
    everyone = {root.id, *(w.id for w in chain)}
    limit = hub.settings.worker_max_depth

    # The root's creator sees and controls a descendant however deep it sits.
    r = await client.get(f"/v1/workers/{deepest.id}")
    assert r.status_code == 200, r.text
    r = await client.get(f"/v1/workers/{root.id}/tree")
    assert r.status_code == 200, r.text
    depth, ids = nesting(r.json())
    assert depth == limit + 1
    assert sorted(ids) == sorted(everyone)
    # A worker below the nesting bound is a root of the answer that names where it belongs.
    tops = {n["id"]: n["parent_worker_id"] for n in r.json()}
    assert tops[chain[limit].id] == chain[limit - 1].id
    r = await client.get(f"/v1/sessions/{root.session_id}/topology")
    assert r.status_code == 200, r.text
    depth, ids = nesting(r.json()["tree"])
    assert (depth, sorted(ids)) == (limit + 1, sorted(everyone))
    assert len(r.json()["child_sessions"]) == DEEP
    async with connect(lead.token) as mcp:
        view = data(await mcp.call_tool("topology", {"session_id": root.session_id}))
    assert sorted(nesting(view["tree"])[1]) == sorted(everyone)

    # The web UI draws it.
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(hub=hub)), base_url="http://parley.test"
    ) as browser:
        r = await browser.post(
            "/ui/signin", data={"token": lead.token}, headers={"Origin": "http://parley.test"}
        )
        assert r.status_code == 303, r.text
        for worker_id in (root.id, deepest.id):
            page = await browser.get(f"/ui/workers/{worker_id}")
            assert page.status_code == 200, page.text
            assert set(re.findall(r'data-worker="(w-[^"]+)"', page.text)) == everyone
            assert list_depths(page.text) == (limit + 1, 0)

    r = await client.post(f"/v1/workers/{deepest.id}/cancel", json={"reason": "not needed"})
    assert r.status_code == 200, r.text
    assert [w["id"] for w in r.json()["cancelled"]] == [deepest.id]
    # Spawning below it is refused: it is far deeper than the limit.
    assert refused(await spawn(client, chain[-2].id)) == (409, "worker_too_deep")


# -- what a tree shows -----------------------------------------------------------------------------
async def test_a_tree_shows_a_caller_only_the_workers_it_may_see(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Api, connect: Connect
) -> None:
    lead = await idle_agent(make_agent, "lead")
    helper = await idle_agent(make_agent, "helper", "lead")
    await idle_agent(make_agent, "other", "lead")
    as_lead, as_helper = api(lead.token), api(helper.token)
    root = await created(await as_lead.post("/v1/workers", json={"prompt": "plan"}))
    r = await as_lead.post(
        f"/v1/workers/{root['id']}/spawn", json={"prompt": "fix it", "agent_id": "helper"}
    )
    child = await created(r)
    r = await as_lead.post(
        f"/v1/workers/{root['id']}/spawn", json={"prompt": "elsewhere", "agent_id": "other"}
    )
    sibling = await created(r)
    grandchild = await created(await spawn(as_helper, child["id"], "dig"))
    hidden = {root["id"], sibling["id"], root["session_id"], sibling["session_id"], "other"}

    def shows(answer: object) -> set[str]:
        text = json.dumps(answer)
        return {x for x in hidden if x in text}

    # A direct read hides the root and the sibling from the child's agent: so does the tree.
    for worker in (root, sibling):
        r = await as_helper.get(f"/v1/workers/{worker['id']}")
        assert refused(r) == (404, "worker_not_found")
    r = await as_helper.get(f"/v1/workers/{child['id']}/tree")
    assert r.status_code == 200, r.text
    # Its own worker is a root of what it sees, naming its parent as its own record does.
    [top] = r.json()
    assert (top["id"], top["parent_worker_id"]) == (child["id"], root["id"])
    assert [n["id"] for n in top["children"]] == [grandchild["id"]]
    assert shows(r.json()) == {root["id"]}
    r = await as_helper.get(f"/v1/sessions/{child['session_id']}/topology")
    assert r.status_code == 200, r.text
    topo = r.json()
    assert [w["id"] for w in topo["workers"]] == [child["id"]]
    assert nesting(topo["tree"])[1] == [child["id"], grandchild["id"]]
    assert [s["id"] for s in topo["child_sessions"]] == [grandchild["session_id"]]
    assert {m["to"] for m in topo["messages"]} <= {
        f"session:{child['session_id']}",
        f"session:{grandchild['session_id']}",
    }
    async with connect(helper.token) as mcp:
        view = data(await mcp.call_tool("topology", {"session_id": child["session_id"]}))
    assert nesting(view["tree"])[1] == [child["id"], grandchild["id"]]
    # Whoever is above sees the whole tree.
    r = await as_lead.get(f"/v1/workers/{child['id']}/tree")
    assert nesting(r.json())[1] == [root["id"], child["id"], grandchild["id"], sibling["id"]]

    # The child's agent sees its worker but does not control it: that refusal says so.
    r = await as_helper.post(f"/v1/workers/{child['id']}/cancel", json={})
    assert refused(r) == (403, "worker_forbidden")
    async with connect(helper.token) as mcp:
        code = refusal(await mcp.call_tool("cancel_worker", {"worker_id": child["id"]}))["code"]
        assert code == "worker_forbidden"
        # Its parent, which it may not see, is not there to act on.
        for tool, args in (
            ("cancel_worker", {"worker_id": root["id"]}),
            ("takeover", {"worker_id": sibling["id"], "instruction": "mine"}),
            ("spawn_child", {"prompt": "x", "parent_worker_id": root["id"]}),
            ("heartbeat", {"worker_id": sibling["id"]}),
            ("report_result", {"summary": "x", "worker_id": sibling["id"]}),
        ):
            assert refusal(await mcp.call_tool(tool, args))["code"] == "worker_not_found", tool


async def test_a_sessions_child_sessions_and_their_mail_show_only_with_a_visible_worker(
    hub: Hub, operator: Principal, make_agent: MakeAgent, api: Api
) -> None:
    # Boss started lead's worker and sees it; a second worker in the same session, which the
    # operator runs (as a hub without one session per root could have it), is not boss's.
    boss = await idle_agent(make_agent, "boss")
    await idle_agent(make_agent, "lead", "boss")
    await idle_agent(make_agent, "other")
    as_boss = api(boss.token)
    mine = await created(
        await as_boss.post("/v1/workers", json={"agent_id": "lead", "prompt": "plan"})
    )
    seen_child = await created(await spawn(as_boss, mine["id"], "look"))
    theirs = Worker.model_validate(mine).model_copy(
        update={"id": "w-theirs", "trace_id": "tr-theirs", "created_by": operator.id}
    )

    async def insert(tx: Tx) -> None:
        tx.insert("workers", theirs)

    await hub.store.write(insert)
    r = await api(hub.operator_token).post(
        f"/v1/workers/{theirs.id}/spawn", json={"prompt": "secret", "agent_id": "other"}
    )
    hidden = await created(r)

    r = await as_boss.get(f"/v1/sessions/{mine['session_id']}/topology")
    assert r.status_code == 200, r.text
    topo = r.json()
    assert [w["id"] for w in topo["workers"]] == [mine["id"]]
    assert nesting(topo["tree"])[1] == [mine["id"], seen_child["id"]]
    assert [s["id"] for s in topo["child_sessions"]] == [seen_child["session_id"]]
    assert f"session:{hidden['session_id']}" not in {m["to"] for m in topo["messages"]}
    assert hidden["session_id"] not in json.dumps(topo)
    # The operator sees both.
    r = await api(hub.operator_token).get(f"/v1/sessions/{mine['session_id']}/topology")
    shown = {s["id"] for s in r.json()["child_sessions"]}
    assert shown == {seen_child["session_id"], hidden["session_id"]}
