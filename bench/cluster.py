"""Several hubs on one PostgreSQL database (SPEC P2): what a second and third hub cost and give.

Each phase runs on a fresh database (``parley_bench_<ulid>``, dropped afterwards):

* ``one_hub_rps`` / ``three_hub_rps``: aggregate ``POST /v1/mail`` requests per second from the
  same client load (``--clients`` load processes of ``--concurrency`` keep-alive requests each,
  ``bench/mail_load.py``) aimed at one hub, then spread over three hubs sharing the database;
  alternated three times (once with ``--quick``), the median of each kept. Each request task
  sends as its own agent, each message to one of ``--recipients`` inboxes drawn at random: a
  send holds its recipient's row lock from its batch's inbox positions to its commit, so with
  few inboxes the hubs wait for each other's commits (``--recipients 4`` shows that case).
  Afterwards the database is counted: ``lost`` (acknowledged sends not stored) and
  ``duplicated`` (stored more often than sent) include every phase's checks.
* ``cross_hub_wake_p50_ms`` / ``_p99_ms``: an agent long-polls ``/v1/agents/{id}/inbox/wait`` on
  hub B while another sends it mail through hub C; from just before the send to the return of
  the wait (the send's own round trip included). The first ``WAKE_WARMUP`` wakes are not timed
  (they open the clients' connections and are each hub's first use of these routes: ~60 ms,
  which alone set the p99 of a quick run's 50 samples); they are counted for loss and repeats.
* ``lease_takeover_s``: a discussion driven by hub A waits on a remote member's turn; hub A is
  killed with SIGKILL; time until another hub has ended the task (polled through hub B), the
  median over ``--kills`` runs (``lease_takeover_max_s`` the slowest). The channel is checked for
  holes and repeats.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from hub_server import (
    HubProcess,
    install_signal_exit,
    machine_description,
    percentile,
    progress,
    set_quiet,
    temp_postgres,
)

LOAD_SCRIPT = Path(__file__).with_name("mail_load.py")
SENDERS = 16
# Short leases so that a takeover is quick to measure; the sweep runs several times a second.
WAKE_WARMUP = 3
LEASE_S = 2.0
LEASE_SWEEP_S = 0.25


async def _agents(op: httpx.AsyncClient, prefix: str, count: int, **extra: Any) -> dict[str, str]:
    tokens: dict[str, str] = {}
    for i in range(count):
        r = await op.post("/v1/agents", json={"id": f"{prefix}{i}", **extra})
        r.raise_for_status()
        tokens[r.json()["principal"]["id"]] = r.json()["token"]
    return tokens


async def _start(hubs: list[HubProcess]) -> None:
    await hubs[0].start()  # creates the operator; the others mint a token of their own
    await asyncio.gather(*(h.start() for h in hubs[1:]))


def _stop(hubs: list[HubProcess]) -> None:
    for hub in hubs:
        hub.stop()


# -- 1. throughput --------------------------------------------------------------------------------
async def _load(urls: list[str], job: dict[str, Any]) -> list[dict[str, Any]]:
    procs = []
    for i, url in enumerate(urls):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(LOAD_SCRIPT),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        procs.append((proc, json.dumps({**job, "url": url, "seed": i}).encode()))
    try:
        outs = await asyncio.gather(*(p.communicate(data) for p, data in procs))
    finally:
        for p, _ in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    return [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outs]


async def _stored_bench_mail(url: str) -> tuple[int, int]:
    """Bench mail stored, and the deadlocks PostgreSQL broke in the database."""
    conn = await asyncpg.connect(url)
    try:
        stored = await conn.fetchval("SELECT count(*) FROM messages WHERE subject = 'bench'")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        deadlocks = await conn.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return int(stored), int(deadlocks or 0)


async def _batches(hub: HubProcess) -> tuple[float, float]:
    """The hub's committed write batches and the jobs in them so far (its /metrics)."""
    async with httpx.AsyncClient(
        base_url=hub.url, headers={"Authorization": f"Bearer {hub.operator_token}"}
    ) as client:
        text = (await client.get("/metrics")).text
    found = {"count": 0.0, "sum": 0.0}
    for line in text.splitlines():
        for part in found:
            if line.startswith(f"parley_store_write_batch_jobs_{part} "):
                found[part] = float(line.split()[1])
    return found["count"], found["sum"]


async def bench_throughput(args: argparse.Namespace, hub_count: int, root: Path) -> dict[str, Any]:
    async with temp_postgres() as url:
        hubs = [HubProcess(root / f"t{hub_count}-{i}", url) for i in range(hub_count)]
        try:
            await _start(hubs)
            async with httpx.AsyncClient(
                base_url=hubs[0].url, headers={"Authorization": f"Bearer {hubs[0].operator_token}"}
            ) as op:
                senders = await _agents(op, "s", SENDERS)
                recipients = list(await _agents(op, "r", args.recipients))
            # Warm every hub up (connections, statement caches) before the clock starts.
            warm = list(senders.values())
            for hub in hubs:
                async with httpx.AsyncClient(base_url=hub.url) as client:
                    for i in range(50):
                        r = await client.post(
                            "/v1/mail",
                            json={
                                "to": recipients[i % len(recipients)],
                                "kind": "notice",
                                "subject": "warm",
                            },
                            headers={"Authorization": f"Bearer {warm[i % len(warm)]}"},
                        )
                        r.raise_for_status()
            # The same load processes either way; with three hubs each goes to its own hub.
            urls = [hubs[i % hub_count].url for i in range(args.clients)]
            job = {
                "concurrency": args.concurrency,
                "sender_tokens": list(senders.values()),
                "recipients": recipients,
                "duration": args.duration,
                "grace": 10.0,
                "start_at": time.time() + 2.0,
            }
            progress(f"throughput: {args.clients} load processes against {hub_count} hub(s)")
            before = [await _batches(hub) for hub in hubs]
            results = await _load(urls, job)
            after = [await _batches(hub) for hub in hubs]
            ok = sum(r["ok"] for r in results)
            errors = sum(r["errors"] for r in results)
            began = min(r["began_wall"] for r in results)
            ended = max(r["ended_wall"] for r in results)
            stored, deadlocks = await _stored_bench_mail(url)
            batches = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
            jobs = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
        finally:
            _stop(hubs)
    return {
        "rps": round(ok / (ended - began), 1),
        "ok": ok,
        "errors": errors,
        # An errored request may still have committed: only acknowledged sends can be lost.
        "lost": max(0, ok - stored),
        "duplicated": max(0, stored - ok - errors),
        "deadlocks": deadlocks,
        # How many jobs each hub's writer put in one transaction (group commit), on average.
        "jobs_per_commit": round(jobs / batches, 2) if batches else None,
    }


# -- 2. cross-hub wake and 3. lease takeover ------------------------------------------------------
async def bench_wake(hubs: list[HubProcess], samples: int) -> dict[str, Any]:
    b, c = hubs[1], hubs[2]
    async with httpx.AsyncClient(
        base_url=hubs[0].url, headers={"Authorization": f"Bearer {hubs[0].operator_token}"}
    ) as op:
        tokens = await _agents(op, "wake", 2)
    waiter_id, sender_id = list(tokens)
    waiter = httpx.AsyncClient(
        base_url=b.url, headers={"Authorization": f"Bearer {tokens[waiter_id]}"}, timeout=30
    )
    sender = httpx.AsyncClient(
        base_url=c.url, headers={"Authorization": f"Bearer {tokens[sender_id]}"}, timeout=30
    )
    latencies: list[float] = []
    seen: dict[str, int] = {}
    sent_ids: set[str] = set()
    try:
        for i in range(WAKE_WARMUP + samples):
            wait = asyncio.create_task(
                waiter.get(f"/v1/agents/{waiter_id}/inbox/wait", params={"timeout_s": 20})
            )
            await asyncio.sleep(0.02)  # let the long poll reach hub B and subscribe
            t0 = time.perf_counter()
            r = await sender.post(
                "/v1/mail", json={"to": waiter_id, "kind": "info", "subject": f"wake {i}"}
            )
            r.raise_for_status()
            sent_ids.add(r.json()["id"])
            got = await wait
            if i >= WAKE_WARMUP:
                latencies.append((time.perf_counter() - t0) * 1000)
            for m in got.json():
                seen[m["id"]] = seen.get(m["id"], 0) + 1
    finally:
        await waiter.aclose()
        await sender.aclose()
    latencies.sort()
    return {
        "p50_ms": round(percentile(latencies, 50) or 0, 2),
        "p99_ms": round(percentile(latencies, 99) or 0, 2),
        "lost": len(sent_ids - set(seen)),
        "duplicated": sum(n - 1 for n in seen.values()),
    }


async def _one_takeover(hubs: list[HubProcess], token: str, k: int) -> tuple[float, int]:
    """Kill the driving hub hubs[0] mid-discussion; return (seconds to takeover, bad rows)."""
    a, b = hubs[0], hubs[1]
    async with (
        httpx.AsyncClient(base_url=a.url, headers={"Authorization": f"Bearer {token}"}) as op_a,
        httpx.AsyncClient(base_url=b.url, headers={"Authorization": f"Bearer {token}"}) as op_b,
    ):
        tokens = await _agents(op_a, f"k{k}m", 2, runtime={"kind": "remote"})
        members = list(tokens)
        r = await op_a.post(
            "/v1/im/sessions", json={"name": f"k{k}", "members": members, "discussion_rounds": 2}
        )
        r.raise_for_status()
        channel = r.json()["id"]
        r = await op_a.post(f"/v1/im/sessions/{channel}/messages", json={"content": "go"})
        r.raise_for_status()
        task_id = r.json()["task_id"]
        async with httpx.AsyncClient(
            base_url=b.url, headers={"Authorization": f"Bearer {tokens[members[0]]}"}, timeout=30
        ) as agent:
            r = await agent.get("/v1/turns/next", params={"timeout_s": 20})
            assert r.status_code == 200, r.text  # the turn is in flight on hub A
        assert a.proc is not None
        a.proc.kill()  # SIGKILL: nothing gets to clean up
        a.proc.wait()
        killed = time.monotonic()
        while True:
            r = await op_b.get(f"/v1/tasks/{task_id}")
            if r.json()["status"] == "finished":
                break
            if time.monotonic() - killed > 60:
                raise RuntimeError("no hub took the discussion over within 60 s")
            await asyncio.sleep(0.01)
        took = time.monotonic() - killed
        r = await op_b.get(f"/v1/channels/{channel}/messages")
        seqs = [m["seq"] for m in r.json()]
        ids = [m["id"] for m in r.json()]
        bad = (seqs != list(range(1, len(seqs) + 1))) + (len(ids) - len(set(ids)))
    return took, bad


async def bench_cluster(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    async with temp_postgres() as url:
        hubs = [HubProcess(root / f"c-{i}", url) for i in range(3)]
        try:
            await _start(hubs)
            progress(f"cross-hub wake: {args.wakes} samples")
            wake = await bench_wake(hubs, args.wakes)
            takeovers: list[float] = []
            bad = 0
            for k in range(args.kills):
                progress(f"lease takeover {k + 1}/{args.kills}")
                token = hubs[0].operator_token
                took, wrong = await _one_takeover(hubs, token, k)
                takeovers.append(took)
                bad += wrong
                # Replace the dead hub and rotate, so the next run kills another process.
                fresh = HubProcess(root / f"c-r{k}", url)
                await fresh.start()
                hubs = [hubs[1], hubs[2], fresh]
        finally:
            _stop(hubs)
    return {"wake": wake, "takeovers": takeovers, "bad_rows": bad}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput, with every run's losses, repeats and errors added up."""
    middle = sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]
    summed = {k: sum(r[k] for r in runs) for k in ("lost", "duplicated", "errors", "deadlocks")}
    return {**middle, **summed, "all_rps": [r["rps"] for r in runs]}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["PARLEY_LEASE_S"] = str(LEASE_S)
    os.environ["PARLEY_LEASE_SWEEP_S"] = str(LEASE_SWEEP_S)
    with tempfile.TemporaryDirectory(prefix="parley-cluster-") as tmp:
        root = Path(tmp)
        # Alternate one hub and three, and keep each one's median: on a shared machine the
        # other processes' load moves from one phase to the next.
        ones: list[dict[str, Any]] = []
        threes: list[dict[str, Any]] = []
        for _ in range(args.repeats):
            ones.append(await bench_throughput(args, 1, root))
            threes.append(await bench_throughput(args, 3, root))
        one, three = _median_run(ones), _median_run(threes)
        cluster = await bench_cluster(args, root)
    wake = cluster["wake"]
    takeovers = sorted(cluster["takeovers"])
    return {
        "one_hub_rps": one["rps"],
        "three_hub_rps": three["rps"],
        "three_vs_one": round(three["rps"] / one["rps"], 3) if one["rps"] else None,
        "one_hub_rps_runs": one["all_rps"],
        "three_hub_rps_runs": three["all_rps"],
        "one_hub_jobs_per_commit": one["jobs_per_commit"],
        "three_hub_jobs_per_commit": three["jobs_per_commit"],
        "cross_hub_wake_p50_ms": wake["p50_ms"],
        "cross_hub_wake_p99_ms": wake["p99_ms"],
        "lease_takeover_s": round(statistics.median(takeovers), 3),
        "lease_takeover_max_s": round(takeovers[-1], 3),
        "lease_s": LEASE_S,
        "lease_sweep_s": LEASE_SWEEP_S,
        "lost": one["lost"] + three["lost"] + wake["lost"],
        "duplicated": one["duplicated"] + three["duplicated"] + wake["duplicated"],
        "takeover_channel_faults": cluster["bad_rows"],
        "request_errors": one["errors"] + three["errors"],
        "deadlocks_one_hub": one["deadlocks"],
        "deadlocks_three_hubs": three["deadlocks"],
        "clients": args.clients,
        "recipients": args.recipients,
        "concurrency_per_client": args.concurrency,
        "duration_s": args.duration,
        "repeats": args.repeats,
        "machine": machine_description(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="finish in under a minute")
    parser.add_argument("--duration", type=float, default=None, help="seconds of mail load")
    parser.add_argument("--clients", type=int, default=3, help="load processes")
    parser.add_argument("--concurrency", type=int, default=4, help="requests per load process")
    parser.add_argument(
        "--recipients",
        type=int,
        default=16,
        help="inboxes the load mails, at random (each send locks its recipient's row until "
        "its batch commits: fewer, hotter rows)",
    )
    parser.add_argument("--json-only", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    args.duration = args.duration or (3.0 if args.quick else 8.0)
    args.repeats = 1 if args.quick else 3
    args.wakes = 50 if args.quick else 300
    args.kills = 2 if args.quick else 5
    set_quiet(args.json_only)
    install_signal_exit()
    with contextlib.suppress(KeyboardInterrupt):
        result = asyncio.run(run(args))
        if not args.json_only:
            for key in (
                "one_hub_rps",
                "three_hub_rps",
                "cross_hub_wake_p99_ms",
                "lease_takeover_s",
            ):
                print(f"{key:>24}: {result[key]}")
        print(json.dumps(result))


if __name__ == "__main__":
    main()
