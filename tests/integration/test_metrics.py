"""``/metrics`` (P5): the hub's Prometheus metrics, for the operator only, counted per hub."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from parley.adapters.runtimes.scripted import ScriptedRuntime
from parley.core.identity import Principal
from parley.service.hub import Hub
from parley.surfaces.rest.app import create_app
from parley.testing import StaticRuntimes
from tests.conftest import MakeAgent
from tests.integration.discussion_support import eventually
from tests.integration.mcp_support import serving


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_count_turns_mail_and_write_batches(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    alpha = await make_agent("alpha", runtime={"kind": "scripted"})
    runtimes.set("alpha", ScriptedRuntime(lambda turn: "on it"))
    assert hub.operator_token is not None
    boss = api(hub.operator_token)
    sent = await boss.post("/v1/mail", json={"to": "alpha", "kind": "notice", "subject": "hi"})
    assert sent.status_code == 201, sent.text
    inbox = await api(alpha.token).get("/v1/agents/alpha/inbox")
    assert [m["subject"] for m in inbox.json()] == ["hi"]
    await hub.channels.post(operator, alpha.principal.work_channel_id or "", "check the build")
    await hub.tasks.wait_idle()

    response = await boss.get("/metrics")

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    seen = samples(response.text)
    assert seen[("parley_turns_total", (("outcome", "accepted"), ("runtime", "scripted")))] == 1
    assert seen[("parley_turn_provider_seconds_count", (("runtime", "scripted"),))] == 1
    assert seen[("parley_turn_hub_seconds_count", (("runtime", "scripted"),))] == 1
    assert seen[("parley_tasks_finished_total", (("reason", "replied"),))] == 1
    assert seen[("parley_mail_sent_total", ())] == 1
    assert seen[("parley_mail_delivered_total", ())] == 1
    assert seen[("parley_events_total", (("type", "mail.sent"),))] == 1
    assert seen[("parley_sse_subscribers", ())] == 0
    assert seen[("parley_store_write_batch_jobs_count", ())] >= 1


async def test_failed_turns_are_counted_by_reason(
    hub: Hub, operator: Principal, make_agent: MakeAgent, runtimes: StaticRuntimes, api: Any
) -> None:
    alpha = await make_agent("alpha", runtime={"kind": "scripted"})
    runtimes.set("alpha", ScriptedRuntime(lambda turn: ""))  # an empty reply is a failure
    await hub.channels.post(operator, alpha.principal.work_channel_id or "", "anyone?")
    await hub.tasks.wait_idle()
    assert hub.operator_token is not None

    seen = samples((await api(hub.operator_token).get("/metrics")).text)

    assert seen[("parley_turns_total", (("outcome", "failed"), ("runtime", "scripted")))] == 1
    failures = (
        "parley_turn_failures_total",
        (("reason", "runtime_empty"), ("runtime", "scripted")),
    )
    assert seen[failures] == 1
    assert seen[("parley_tasks_finished_total", (("reason", "failed"),))] == 1


async def test_metrics_need_the_operators_token(hub: Hub, make_agent: MakeAgent, api: Any) -> None:
    alpha = await make_agent("alpha")

    anonymous = await api(None).get("/metrics")
    agent = await api(alpha.token).get("/metrics")

    assert anonymous.status_code == 401
    assert (agent.status_code, agent.json()["code"]) == (403, "operator_only")
    assert "parley_" not in agent.text


async def test_open_event_streams_are_a_gauge(hub: Hub, make_agent: MakeAgent) -> None:
    alpha = await make_agent("alpha")
    assert hub.operator_token is not None
    boss = {"Authorization": f"Bearer {hub.operator_token}"}

    async def open_streams(client: httpx.AsyncClient) -> float:
        page = (await client.get("/metrics", headers=boss)).text
        return samples(page)[("parley_sse_subscribers", ())]

    async with serving(create_app(hub=hub)) as url, httpx.AsyncClient(base_url=url) as client:
        note = {"to": "alpha", "kind": "notice", "subject": "backfilled"}
        assert (await client.post("/v1/mail", json=note, headers=boss)).status_code == 201
        headers = {"Authorization": f"Bearer {alpha.token}"}
        async with client.stream("GET", "/v1/agents/alpha/inbox/stream", headers=headers) as r:
            assert r.status_code == 200
            # The backfilled message arrives once the server's generator runs: counted by then.
            await anext(r.aiter_lines())
            assert await open_streams(client) == 1

        async def closed() -> bool:
            return await open_streams(client) == 0

        await eventually(closed, "the closed stream to leave the gauge")
