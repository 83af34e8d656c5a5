"""Mail throughput and live-delivery latency (SPEC Q2).

Three figures, each on a fresh data root (and, on PostgreSQL, a fresh database):

* ``service_msgs_per_s``: send + deliver through the Python service layer in this process:
  concurrent sender tasks call ``hub.mail.send``; bus subscribers on the recipients' inbox
  topics count each delivery. Messages observed / wall time from first send to last delivery.
* ``rest_reqs_per_s``: ``POST /v1/mail`` against a real uvicorn server in a child process,
  driven by separate load processes (keep-alive HTTP/1.1, httpx).
* ``sse_p50_ms`` / ``sse_p99_ms``: while that load runs, SSE clients here follow the recipients'
  ``/v1/agents/{id}/inbox/stream``; latency = receive wall time - the sender's ``t_ns``.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hub_server import (
    HubProcess,
    install_signal_exit,
    machine_description,
    percentile,
    pin_to,
    process_cpu_seconds,
    progress,
    set_quiet,
    split_cpus,
    temp_postgres,
)
from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.core.mail import SendRequest
from parley.heap import settle_heap
from parley.service.hub import Hub
from parley.service.identity import AgentSpec

LOAD_SCRIPT = Path(__file__).with_name("mail_load.py")
SENDER_AGENTS = 16
RECIPIENTS = 4
CATCH_UP_S = 30.0


@dataclass(frozen=True)
class Plan:
    backend: str
    database_url: str | None
    quick: bool
    service_s: float
    rest_s: float
    warmup_s: float
    senders: int
    rest_clients: int
    rest_concurrency: int
    grace_s: float = CATCH_UP_S
    sse: bool = True
    pin: bool = False
    phases: tuple[str, ...] = ("service", "rest")


# -- 1. the service layer ---------------------------------------------------------------------
@dataclass
class Deliveries:
    """What the bus subscribers saw; ``expect`` wakes the waiter once enough has arrived."""

    count: int = 0
    overflows: int = 0
    last: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)
    target: int | None = None
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def observe(self, sent_ns: int) -> None:
        now = time.perf_counter_ns()
        self.count += 1
        self.last = now / 1e9
        self.latencies_ns.append(now - sent_ns)
        if self.target is not None and self.count >= self.target:
            self.reached.set()

    def expect(self, target: int) -> None:
        self.target = target
        if self.count >= target:
            self.reached.set()


async def _consume(sub: Any, seen: Deliveries) -> None:
    while True:
        data = await sub.get()
        if data.get("type") == "overflow":
            seen.overflows += 1
        elif data.get("type") == "mail":
            seen.observe(int(data["message"]["payload"]["t"]))


async def _send_until(hub: Hub, sender: Principal, to: str, end: float, sent: list[int]) -> None:
    while time.perf_counter() < end:
        req = SendRequest(
            to=to,
            kind="notice",
            subject="bench",
            body="load",
            payload={"t": time.perf_counter_ns()},
        )
        await hub.mail.send(sender, req)
        sent[0] += 1


async def service_round(
    hub: Hub,
    senders: list[Principal],
    recipients: list[str],
    tasks: int,
    seconds: float,
    grace_s: float,
) -> tuple[int, float, Deliveries]:
    """Run ``tasks`` concurrent senders for ``seconds``; wait until every send was observed."""
    seen = Deliveries()
    subs = [hub.bus.subscribe([f"inbox:{rid}"]) for rid in recipients]
    consumers = [asyncio.create_task(_consume(sub, seen)) for sub in subs]
    sent = [0]
    try:
        began = time.perf_counter()
        end = began + seconds
        await asyncio.gather(
            *(
                _send_until(
                    hub, senders[i % len(senders)], recipients[i % len(recipients)], end, sent
                )
                for i in range(tasks)
            )
        )
        seen.expect(sent[0])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(seen.reached.wait(), grace_s)
    finally:
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
        for sub in subs:
            await sub.close()
    return sent[0], began, seen


async def mail_agents(
    hub: Hub, operator: Principal, senders: int, recipients: int
) -> tuple[list[Principal], list[str]]:
    """Fresh sender agents (their principals) and recipient agents (their ids)."""
    run = new_ulid()[-6:].lower()
    made_senders = [
        (await hub.identity.create_agent(operator, AgentSpec(id=f"s{i}-{run}"))).principal
        for i in range(senders)
    ]
    made_recipients = [
        (await hub.identity.create_agent(operator, AgentSpec(id=f"r{i}-{run}"))).principal.id
        for i in range(recipients)
    ]
    return made_senders, made_recipients


async def bench_service(plan: Plan, home: Path, database_url: str | None) -> dict[str, Any]:
    # A load test measures throughput: the per-sender quotas would refuse it by design.
    settings = Settings(
        home=home, database_url=database_url, send_rate_per_minute=0, send_bytes_per_minute=0
    )
    hub = build_hub(settings)
    await hub.start()
    settle_heap()  # as `parley serve` does once its hub has started
    try:
        assert hub.operator_token is not None
        operator = await hub.identity.authenticate(hub.operator_token)
        senders, recipients = await mail_agents(hub, operator, SENDER_AGENTS, RECIPIENTS)
        progress(f"service: warming up for {plan.warmup_s:g}s")
        await service_round(hub, senders, recipients, plan.senders, plan.warmup_s, plan.grace_s)
        progress(f"service: {plan.senders} concurrent senders for {plan.service_s:g}s")
        cpu_before = time.process_time()
        sent, began, seen = await service_round(
            hub, senders, recipients, plan.senders, plan.service_s, plan.grace_s
        )
        cpu = time.process_time() - cpu_before
    finally:
        await hub.stop()
    wall = max(seen.last - began, 1e-9)
    lat = sorted(ns / 1e6 for ns in seen.latencies_ns)
    result = {
        "service_msgs_per_s": round(seen.count / wall, 1),
        "messages": sent,
        "messages_delivered": seen.count,
        "service_overflows": seen.overflows,
        "service_wall_s": round(wall, 3),
        "service_cpu_pct": round(100 * cpu / wall, 1),
        "service_cpu_ms_per_msg": round(1000 * cpu / max(seen.count, 1), 3),
        "service_delivery_p50_ms": _ms(percentile(lat, 50)),
        "service_delivery_p99_ms": _ms(percentile(lat, 99)),
    }
    progress(
        f"service: {seen.count}/{sent} delivered in {wall:.2f}s = "
        f"{result['service_msgs_per_s']} msg/s"
    )
    return result


# -- 2 and 3. REST load with SSE subscribers -----------------------------------------------------
@dataclass
class SseSamples:
    since_ns: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    received: int = 0
    target: int | None = None
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def observe(self, data: str) -> None:
        now = time.time_ns()
        sent = json.loads(data).get("payload", {}).get("t_ns")
        if sent is None or sent < self.since_ns:
            return  # warm-up mail replayed from the store, not live delivery under load
        self.received += 1
        self.latencies_ms.append((now - int(sent)) / 1e6)
        if self.target is not None and self.received >= self.target:
            self.reached.set()


async def _follow_inbox(
    client: httpx.AsyncClient, owner: str, token: str, samples: SseSamples, ready: asyncio.Event
) -> None:
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    async with client.stream("GET", f"/v1/agents/{owner}/inbox/stream", headers=headers) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"SSE for {owner!r} answered {resp.status_code}")
        ready.set()
        event = ""
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "mail":
                samples.observe(line[5:].strip())
            elif not line:
                event = ""


async def create_agents(client: httpx.AsyncClient, prefix: str, count: int) -> dict[str, str]:
    tokens: dict[str, str] = {}
    for i in range(count):
        resp = await client.post("/v1/agents", json={"id": f"{prefix}{i}"})
        resp.raise_for_status()
        tokens[resp.json()["principal"]["id"]] = resp.json()["token"]
    return tokens


async def _warm_rest(client: httpx.AsyncClient, tokens: list[str], to: list[str], n: int) -> int:
    """Send ``n`` messages to warm the server up; returns how many were refused (a refusal
    under load is a finding to report, not a reason to stop)."""

    async def one(i: int) -> bool:
        body = {"to": to[i % len(to)], "kind": "notice", "subject": "warm", "body": "up"}
        headers = {"Authorization": f"Bearer {tokens[i % len(tokens)]}"}
        resp = await client.post("/v1/mail", json=body, headers=headers)
        if resp.status_code != 201:
            progress(f"rest: warm-up send answered {resp.status_code}: {resp.text[:200]}")
        return resp.status_code == 201

    refused = 0
    for start in range(0, n, 16):
        done = await asyncio.gather(*(one(i) for i in range(start, min(n, start + 16))))
        refused += done.count(False)
    return refused


async def run_load(
    url: str, clients: int, concurrency: int, job: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run ``clients`` load processes (``mail_load.py``) with ``concurrency`` requests in flight
    in total against the server at ``url``; their result lines."""
    per_client = [concurrency // clients] * clients
    per_client[0] += concurrency - sum(per_client)
    procs: list[asyncio.subprocess.Process] = []
    jobs: list[bytes] = []
    try:
        for concurrency in per_client:
            # The job (with the agents' tokens) goes through stdin, not the command line.
            jobs.append(json.dumps({**job, "url": url, "concurrency": concurrency}).encode())
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(LOAD_SCRIPT),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        outputs = await asyncio.gather(
            *(p.communicate(data) for p, data in zip(procs, jobs, strict=True))
        )
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    results = []
    for p, (out, _) in zip(procs, outputs, strict=True):
        lines = out.decode().strip().splitlines()
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"a load process failed (exit {p.returncode})")
        results.append(json.loads(lines[-1]))
    return results


@contextlib.asynccontextmanager
async def _following(
    client: httpx.AsyncClient, inboxes: dict[str, str], samples: SseSamples
) -> AsyncIterator[None]:
    readies = {rid: asyncio.Event() for rid in inboxes}
    tasks = [
        asyncio.create_task(_follow_inbox(client, rid, tok, samples, readies[rid]))
        for rid, tok in inboxes.items()
    ]
    try:
        connected = asyncio.ensure_future(asyncio.gather(*(ev.wait() for ev in readies.values())))
        watched: list[asyncio.Future[Any]] = [connected, *tasks]
        done, _ = await asyncio.wait(watched, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if connected not in done:
            connected.cancel()
            failed = [t for t in tasks if t.done()]
            cause = failed[0].exception() if failed else None
            raise RuntimeError("the SSE subscribers did not connect") from cause
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def bench_rest(plan: Plan, home: Path, database_url: str | None) -> dict[str, Any]:
    split = split_cpus() if plan.pin else None
    server = HubProcess(home, database_url, cpus=split[0] if split else None)
    original = os.sched_getaffinity(0) if split else None
    try:
        if split:
            # This process (the SSE subscribers) shares the load generators' CPUs, not the
            # server's.
            pin_to(split[1])
        await server.start()
        where = f" on CPU {sorted(split[0])}, load on {sorted(split[1])}" if split else ""
        progress(f"rest: hub pid {server.pid} serving at {server.url}{where}")
        result = await _measure_rest(plan, server, new_ulid()[-6:].lower(), split)
    finally:
        server.stop()
        if original is not None:
            pin_to(original)
    result["pinned"] = (
        None if split is None else {"server": sorted(split[0]), "load": sorted(split[1])}
    )
    return result


async def _measure_rest(
    plan: Plan, server: HubProcess, run: str, split: tuple[set[int], set[int]] | None
) -> dict[str, Any]:
    op = {"Authorization": f"Bearer {server.operator_token}"}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    timeout = httpx.Timeout(30.0, read=None)
    async with httpx.AsyncClient(
        base_url=server.url, headers=op, limits=limits, timeout=timeout
    ) as client:
        senders = await create_agents(client, f"s{run}-", SENDER_AGENTS)
        recipients = await create_agents(client, f"r{run}-", RECIPIENTS)
        warmup_errors = await _warm_rest(client, list(senders.values()), list(recipients), 400)
        samples = SseSamples()
        followed = recipients if plan.sse else {}
        async with _following(client, followed, samples):
            progress(
                f"rest: {plan.rest_clients} load process(es), {plan.rest_concurrency} concurrent "
                f"requests for {plan.rest_s:g}s; SSE on {len(followed)} inboxes"
            )
            start_at = time.time() + 2.0
            samples.since_ns = int(start_at * 1e9)
            job = {
                "sender_tokens": list(senders.values()),
                "recipients": list(recipients),
                "start_at": start_at,
                "duration": plan.rest_s,
                "grace": plan.grace_s,
                "cpus": sorted(split[1]) if split else None,
            }
            cpu_before = process_cpu_seconds(server.pid)
            own_before = time.process_time()
            loads = await run_load(server.url, plan.rest_clients, plan.rest_concurrency, job)
            cpu_after = process_cpu_seconds(server.pid)
            own_cpu = time.process_time() - own_before
            ok = sum(r["ok"] for r in loads)
            samples.target = ok if plan.sse else 0
            if samples.received >= samples.target:
                samples.reached.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(samples.reached.wait(), plan.grace_s)
    result = _rest_result(plan, loads, samples, cpu_before, cpu_after)
    result["sse_client_cpu_pct"] = round(100 * own_cpu / result["rest_window_s"], 1)
    result["rest_warmup_errors"] = warmup_errors
    return result


def _rest_result(
    plan: Plan,
    loads: list[dict[str, Any]],
    samples: SseSamples,
    cpu_before: float | None,
    cpu_after: float | None,
) -> dict[str, Any]:
    ok = sum(r["ok"] for r in loads)
    window = max(r["ended_wall"] for r in loads) - min(r["began_wall"] for r in loads)
    lat = sorted(samples.latencies_ms)
    errors = [r["last_error"] for r in loads if r["last_error"]]
    server_cpu = server_ms = None
    if cpu_before is not None and cpu_after is not None:
        server_cpu = round(100 * (cpu_after - cpu_before) / window, 1)
        server_ms = round(1000 * (cpu_after - cpu_before) / max(ok, 1), 3)
    result = {
        "rest_reqs_per_s": round(ok / window, 1),
        "rest_requests": ok,
        "rest_errors": sum(r["errors"] for r in loads),
        "rest_last_error": errors[-1] if errors else None,
        "rest_window_s": round(window, 3),
        "rest_req_p50_ms": _ms(statistics.median(r["req_p50_ms"] or 0 for r in loads)),
        "rest_req_p99_ms": _ms(max(r["req_p99_ms"] or 0 for r in loads)),
        "rest_clients": plan.rest_clients,
        "rest_concurrency": plan.rest_concurrency,
        "server_cpu_pct": server_cpu,
        "server_cpu_ms_per_req": server_ms,
        "load_cpu_pct": round(100 * sum(r["cpu_s"] for r in loads) / window, 1),
        "sse_p50_ms": _ms(percentile(lat, 50)),
        "sse_p99_ms": _ms(percentile(lat, 99)),
        "sse_max_ms": _ms(lat[-1] if lat else None),
        "sse_samples": samples.received,
        "sse_missing": max(0, ok - samples.received) if plan.sse else None,
    }
    progress(
        f"rest: {ok} requests in {window:.2f}s = {result['rest_reqs_per_s']} req/s "
        f"(server CPU {server_cpu}%); SSE p50 {result['sse_p50_ms']} ms, "
        f"p99 {result['sse_p99_ms']} ms over {samples.received} deliveries"
    )
    return result


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# -- driver -------------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def database(plan: Plan) -> AsyncIterator[str | None]:
    """The database a phase runs on: the given URL, a throwaway PostgreSQL database, or the
    SQLite file inside the phase's data root (None)."""
    if plan.database_url is not None or plan.backend == "sqlite":
        yield plan.database_url
        return
    async with temp_postgres() as url:
        yield url


async def pg_deadlocks(url: str | None) -> int | None:
    """Deadlocks PostgreSQL has counted in this database so far (None on SQLite)."""
    if url is None or not url.startswith(("postgresql", "postgres://")):
        return None
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        found = await conn.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return None if found is None else int(found)


def _delta(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


async def run(plan: Plan) -> dict[str, Any]:
    machine = machine_description()  # before we add load: how busy others keep the machine
    scratch = Path(tempfile.mkdtemp(prefix="parley-bench-mail-"))
    try:
        service: dict[str, Any] = dict.fromkeys(["service_msgs_per_s", "messages"])
        rest: dict[str, Any] = dict.fromkeys(
            ["rest_reqs_per_s", "rest_requests", "sse_p50_ms", "sse_p99_ms", "sse_samples"]
        )
        if "service" in plan.phases:
            async with database(plan) as url:
                before = await pg_deadlocks(url)
                service = await bench_service(plan, scratch / "service", url)
                service["service_pg_deadlocks"] = _delta(before, await pg_deadlocks(url))
        if "rest" in plan.phases:
            async with database(plan) as url:
                before = await pg_deadlocks(url)
                rest = await bench_rest(plan, scratch / "rest", url)
                rest["rest_pg_deadlocks"] = _delta(before, await pg_deadlocks(url))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "bench": "mail",
        "backend": plan.backend,
        "quick": plan.quick,
        **{k: service[k] for k in ("service_msgs_per_s",)},
        **{k: rest[k] for k in ("rest_reqs_per_s", "sse_p50_ms", "sse_p99_ms")},
        **service,
        **rest,
        "service_senders": plan.senders,
        "service_seconds": plan.service_s,
        "rest_seconds": plan.rest_s,
        "machine": machine,
    }


def parse_plan(argv: list[str] | None = None) -> tuple[Plan, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--database-url",
        default=None,
        help="use this database instead of a fresh one (postgres: a throwaway "
        "parley_bench_<ulid> database is created and dropped by default)",
    )
    parser.add_argument("--quick", action="store_true", help="finish in under a minute")
    parser.add_argument("--duration", type=float, default=None, help="seconds per measured phase")
    parser.add_argument("--senders", type=int, default=64, help="service-layer sender tasks")
    parser.add_argument("--rest-clients", type=int, default=1, help="REST load processes")
    parser.add_argument(
        "--rest-concurrency",
        type=int,
        default=8,
        help="concurrent REST requests in total (8 saturates one server core; more only queues)",
    )
    parser.add_argument(
        "--only", choices=["service", "rest"], default=None, help="run one phase (for profiling)"
    )
    parser.add_argument(
        "--no-sse",
        action="store_true",
        help="no SSE subscribers during the REST load (to see what live delivery costs)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="give the server a CPU of its own and the load generators and SSE subscribers the "
        "others (off by default: on a shared machine the scheduler does better unpinned)",
    )
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    default_s = 3.0 if args.quick else 15.0
    seconds = args.duration if args.duration is not None else default_s
    if args.rest_clients < 1 or args.rest_concurrency < args.rest_clients or args.senders < 1:
        parser.error("need at least one sender, one load process and one request per process")
    backend = args.backend
    if args.database_url:
        backend = "postgres" if args.database_url.startswith("postgres") else "sqlite"
    plan = Plan(
        backend=backend,
        database_url=args.database_url,
        quick=args.quick,
        service_s=seconds,
        rest_s=seconds,
        warmup_s=0.5 if args.quick else 2.0,
        senders=args.senders,
        rest_clients=args.rest_clients,
        rest_concurrency=args.rest_concurrency,
        grace_s=5.0 if args.quick else CATCH_UP_S,
        sse=not args.no_sse,
        pin=args.pin,
        phases=(args.only,) if args.only else ("service", "rest"),
    )
    return plan, args.json_only


def main(argv: list[str] | None = None) -> None:
    plan, json_only = parse_plan(argv)
    set_quiet(json_only)
    install_signal_exit()
    try:
        if importlib.util.find_spec("uvloop") is not None:
            import uvloop

            result = uvloop.run(run(plan))
        else:
            result = asyncio.run(run(plan))
    except KeyboardInterrupt:
        progress("interrupted; temporary data, databases and processes were cleaned up")
        raise SystemExit(130) from None
    if not json_only:
        for key in ("service_msgs_per_s", "rest_reqs_per_s", "sse_p50_ms", "sse_p99_ms"):
            print(f"{key:>20}: {result[key]}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
