"""parley beside its references, measured in one run (SPEC Q1, Q2).

This machine's speed moves several-fold from hour to hour, so absolute figures cannot say
whether parley is fast; ratios against a reference measured in the same minutes can. Each pair
is measured alternately, reference then parley, several times, so that drift hits both sides.

* Turns: AutoGen AgentChat (``RoundRobinGroupChat``, three ``AssistantAgent``s on
  ``ReplayChatCompletionClient``, nothing persisted) against parley (three scripted members of a
  discussion channel taking turns, every turn persisted on SQLite), both 15 turns per team with
  the same reply texts. AutoGen's figure is its wall time per turn; parley's is the hub's own
  time per turn as ``bench/discussion.py`` defines it: from one turn's return from the runtime
  to the next turn's call (parse, commit, next speaker, prompt). ``turn_ratio_vs_autogen`` is
  parley's median over AutoGen's.
* Mail: one transaction per message inserting a row of the mail table's width with the hub's
  pragmas on the same disk (the per-commit floor, ``raw_sqlite_commits_per_s``) against
  parley's service-layer send + delivery (``parley_mail_per_s``, delivered messages per second
  with concurrent senders, as ``bench/mail.py`` measures it). Beside them, the same rows
  committed by a bare group-commit writer with no other work (``bare_group_commit_per_s``):
  what group commit itself reaches in one Python process, so the gap to the raw floor is all the
  time parley's work per message could take at a ratio of 1. Then the pair again with both
  sides at ``synchronous=FULL`` (``PARLEY_SQLITE_SYNCHRONOUS=full``), where a commit waits for
  the disk: ``mail_ratio_vs_raw_sqlite_full``, the mail ratio with a target (>= 1.5); the
  ``synchronous=NORMAL`` ratio ``mail_ratio_vs_raw_sqlite`` is reported beside it.
* HTTP: a Starlette route that reads a JSON body and answers a small fixed JSON body
  (``bare_http_rps``) against parley's ``POST /v1/mail`` (``parley_rest_rps``); both under
  uvicorn with the settings ``parley serve`` uses, driven by the same load process.
* MCP: ``send_message`` through the official MCP client over Streamable HTTP against
  ``POST /v1/mail`` with the same pattern: one client sending one after another, then four
  clients at once (``mcp_send_per_s`` and ``rest_send_per_s`` are the four-client figures;
  the hub's CPU per send is reported for both).

AutoGen comes with the ``compare`` extra (``pip install -e '.[compare]'``); without it the turn
figures are null and the output says so. Progress goes to stderr; the last line of stdout is
one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from common import (
    TimedRuntime,
    filler,
    load_average,
    ms,
    parse_args,
    run_main,
    started_hub,
)
from hub_server import HubProcess, machine_description, process_cpu_seconds, progress
from mail import create_agents, mail_agents, run_load, service_round
from mcp_client import mcp_session, result_data
from parley.core.ids import new_ulid
from parley.service.conversations.channels import ChannelSpec
from parley.service.identity import AgentSpec

MEMBERS = 3
ROUNDS = 5  # 15 turns per team
REPLY_CHARS = 240
MAIL_SENDERS = 64  # as bench/mail.py: the senders of a busy hub
MAIL_AGENTS = 8
HTTP_CONCURRENCY = 8
MCP_CLIENTS = 4


@dataclass(frozen=True)
class Plan:
    quick: bool
    teams: int
    mail_rounds: int
    mail_s: float
    http_rounds: int
    http_s: float
    mcp_rounds: int
    mcp_sends: int


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        return Plan(True, 8, 3, 1.0, 2, 2.0, 2, 60)
    return Plan(False, 40, 6, 3.0, 5, 5.0, 3, 300)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


# -- 1. turns ----------------------------------------------------------------------------------
def reply_text(member: int) -> str:
    return filler(f"speaker-{member} answers", REPLY_CHARS)


def autogen_missing() -> str | None:
    for module in ("autogen_agentchat", "autogen_ext"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: pip install -e '.[compare]'"
    return None


async def autogen_team_turn_ms(topic: str) -> float:
    """One AutoGen team talking for ``MEMBERS * ROUNDS`` turns: its wall time per turn."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.replay import ReplayChatCompletionClient

    turns = MEMBERS * ROUNDS
    agents = [
        AssistantAgent(
            f"speaker_{i}",
            model_client=ReplayChatCompletionClient([reply_text(i)] * ROUNDS),
        )
        for i in range(1, MEMBERS + 1)
    ]
    # The task message counts as one message of the team's run.
    team = RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(turns + 1))
    began = time.perf_counter()
    result = await team.run(task=topic)
    elapsed = time.perf_counter() - began
    spoken = len(result.messages) - 1
    if spoken != turns:
        raise RuntimeError(f"the AutoGen team spoke {spoken} times, not {turns}")
    return 1000 * elapsed / turns


class ParleyTeam:
    """Three scripted members of one discussion channel on a hub in this process; each topic
    posted is one task of ``ROUNDS`` rounds."""

    def __init__(self, hub: Any, runtimes: Any, operator: Any) -> None:
        self.hub = hub
        self.runtimes = runtimes
        self.operator = operator
        self.calls: list[tuple[str | None, float, float]] = []
        self.channel_id = ""

    async def setup(self) -> None:
        from parley.adapters.runtimes.scripted import ScriptedRuntime

        members = [f"speaker-{i}" for i in range(1, MEMBERS + 1)]
        for i, member in enumerate(members, start=1):
            await self.hub.identity.create_agent(
                self.operator, AgentSpec(id=member, runtime={"kind": "scripted"})
            )
            reply = reply_text(i)
            self.runtimes.set(
                member, TimedRuntime(ScriptedRuntime(lambda _t, r=reply: r), self.note)
            )
        channel = await self.hub.channels.create(
            self.operator, ChannelSpec(name="compare", members=members, discussion_rounds=ROUNDS)
        )
        self.channel_id = channel.id

    def note(self, turn: Any, wall_in: float, wall_out: float, _ci: float, _co: float) -> None:
        self.calls.append((turn.task_id, wall_in, wall_out))

    async def turn_ms(self, topic: str) -> float:
        """One task: the hub's mean time per turn between runtime calls."""
        self.calls.clear()
        await self.hub.channels.post(self.operator, self.channel_id, topic)
        await self.hub.tasks.wait_idle()
        if len(self.calls) != MEMBERS * ROUNDS:
            raise RuntimeError(f"the parley task made {len(self.calls)} turns")
        spans = [
            after[1] - before[2]
            for before, after in zip(self.calls, self.calls[1:], strict=False)
            if before[0] == after[0]
        ]
        return 1000 * statistics.fmean(spans)


async def measure_turns(plan: Plan, home: Path) -> dict[str, Any]:
    missing = autogen_missing()
    if missing:
        progress(f"turns: AutoGen is missing ({missing}); parley measured alone")
    autogen: list[float] = []
    parley: list[float] = []
    async with started_hub(
        "sqlite", home_prefix="parley-bench-compare-turns-", database_prefix=""
    ) as (hub, runtimes, operator):
        team = ParleyTeam(hub, runtimes, operator)
        await team.setup()
        # Warm both up: imports, caches, the first statements compiled.
        await team.turn_ms("warm-up topic")
        if not missing:
            await autogen_team_turn_ms("warm-up topic")
        progress(f"turns: {plan.teams} teams each, alternating AutoGen and parley")
        for i in range(plan.teams):
            topic = filler(f"topic {i}", REPLY_CHARS)
            if not missing:
                autogen.append(await autogen_team_turn_ms(topic))
            parley.append(await team.turn_ms(topic))
    autogen_ms, parley_ms = median(autogen), median(parley)
    progress(f"turns: AutoGen {ms(autogen_ms)} ms/turn, parley {ms(parley_ms)} ms/turn")
    return {
        "autogen_turn_ms": ms(autogen_ms),
        "parley_turn_ms": ms(parley_ms),
        "turn_ratio_vs_autogen": ratio(parley_ms, autogen_ms),
        "autogen_missing": missing,
        "turn_teams": len(parley),
        "autogen_turn_spread_ms": [ms(min(autogen)), ms(max(autogen))] if autogen else None,
        "parley_turn_spread_ms": [ms(min(parley)), ms(max(parley))],
    }


# -- 2. mail against one commit per message ------------------------------------------------------
class RawSqlite:
    """A copy of the hub's ``messages`` table in its own WAL database beside the hub's file,
    with the hub's pragmas: written one transaction per row, the floor a commit-per-message
    design cannot go below; and by a bare group-commit writer, what group commit reaches in
    one Python process with no work per message but its row."""

    def __init__(self, hub_db: Path, path: Path, *, synchronous: str) -> None:
        source = sqlite3.connect(hub_db)
        try:
            ddl = source.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
            ).fetchone()[0]
            cur = source.execute("SELECT * FROM messages ORDER BY seq DESC LIMIT 1")
            self.columns = [d[0] for d in cur.description]
            self.template = list(cur.fetchone())
        finally:
            source.close()
        self.conn = sqlite3.connect(path)
        for pragma in (
            "journal_mode=WAL",
            "busy_timeout=5000",
            f"synchronous={synchronous.upper()}",
            "wal_autocheckpoint=0",
        ):
            self.conn.execute(f"PRAGMA {pragma}").fetchall()
        self.conn.execute(ddl)
        self.conn.commit()
        names = ", ".join(self.columns)
        marks = ", ".join("?" for _ in self.columns)
        self.insert = f"INSERT INTO messages ({names}) VALUES ({marks})"
        self.id_at = self.columns.index("id")
        self.seq_at = self.columns.index("seq")
        self.template[self.columns.index("idempotency_key")] = None
        self.seq = 0

    def _row(self) -> list[Any]:
        row = list(self.template)
        self.seq += 1
        row[self.id_at] = new_ulid()
        row[self.seq_at] = self.seq
        return row

    def commits_for(self, seconds: float) -> tuple[int, float]:
        done = 0
        began = time.perf_counter()
        end = began + seconds
        while time.perf_counter() < end:
            self.conn.execute(self.insert, self._row())
            self.conn.commit()
            done += 1
        elapsed = time.perf_counter() - began
        self._checkpoint()
        return done, elapsed

    async def group_commits_for(self, seconds: float, senders: int) -> tuple[int, float]:
        """``senders`` tasks each queue a row and wait for its commit; one writer commits all
        that is queued with one ``executemany``, as the hub's writer does."""
        loop = asyncio.get_running_loop()
        queued: list[tuple[list[Any], asyncio.Future[None]]] = []
        ready = asyncio.Event()
        done = 0

        async def writer() -> None:
            while True:
                await ready.wait()
                ready.clear()
                batch = queued[:]
                queued.clear()
                self.conn.executemany(self.insert, [row for row, _ in batch])
                self.conn.commit()
                for _, committed in batch:
                    committed.set_result(None)

        async def sender(end: float) -> None:
            nonlocal done
            while time.perf_counter() < end:
                committed = loop.create_future()
                queued.append((self._row(), committed))
                ready.set()
                await committed
                done += 1

        writing = asyncio.create_task(writer())
        try:
            began = time.perf_counter()
            await asyncio.gather(*(sender(began + seconds) for _ in range(senders)))
            elapsed = time.perf_counter() - began
        finally:
            writing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writing
        self._checkpoint()
        return done, elapsed

    def _checkpoint(self) -> None:
        # Outside the timed window, as the hub's checkpoints run beside its writer.
        self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        self.conn.close()


@dataclass
class MailRates:
    raw: list[float] = field(default_factory=list)
    parley: list[float] = field(default_factory=list)
    group: list[float] = field(default_factory=list)


async def mail_rates(plan: Plan, synchronous: str, *, group_commit: bool) -> MailRates:
    """Alternately: one commit per row, parley's send + delivery (and a bare group-commit
    writer), on a hub and a raw database both with ``synchronous`` at the given setting."""
    from parley.service.mail.mailbox import SendRequest

    rates = MailRates()
    async with started_hub(
        "sqlite",
        home_prefix="parley-bench-compare-mail-",
        database_prefix="",
        sqlite_synchronous=synchronous,
    ) as (hub, _runtimes, operator):
        senders, recipients = await mail_agents(hub, operator, MAIL_AGENTS, MAIL_AGENTS)
        # The raw table copies a real row: the same width, the same text.
        await hub.mail.send(
            senders[0],
            SendRequest(
                to=recipients[0], kind="notice", subject="bench", body="load", payload={"t": 1}
            ),
        )
        # The raw database lies beside the hub's: the same disk, the same file system.
        hub_db = hub.settings.data_root() / "parley.db"
        floor = RawSqlite(hub_db, hub_db.with_name("raw-commits.db"), synchronous=synchronous)
        try:
            await service_round(hub, senders, recipients, MAIL_SENDERS, 0.5, 10.0)
            floor.commits_for(0.3)
            progress(
                f"mail, synchronous={synchronous}: {plan.mail_rounds} rounds of "
                f"{plan.mail_s:g}s each, alternating"
            )
            for _ in range(plan.mail_rounds):
                done, elapsed = floor.commits_for(plan.mail_s)
                rates.raw.append(done / elapsed)
                sent, began, seen = await service_round(
                    hub, senders, recipients, MAIL_SENDERS, plan.mail_s, 10.0
                )
                if seen.count < sent:
                    raise RuntimeError(f"mail: {sent - seen.count} of {sent} not delivered")
                rates.parley.append(seen.count / max(seen.last - began, 1e-9))
                if group_commit:
                    done, elapsed = await floor.group_commits_for(plan.mail_s, MAIL_SENDERS)
                    rates.group.append(done / elapsed)
        finally:
            floor.close()
    return rates


async def measure_mail(plan: Plan, home: Path) -> dict[str, Any]:
    normal = await mail_rates(plan, "normal", group_commit=True)
    full = await mail_rates(plan, "full", group_commit=False)
    raw, parley, group = median(normal.raw), median(normal.parley), median(normal.group)
    raw_full, parley_full = median(full.raw), median(full.parley)
    progress(
        f"mail: raw SQLite {raw:.0f} commits/s, bare group commit {group:.0f} rows/s, "
        f"parley {parley:.0f} msg/s; synchronous=FULL: raw {raw_full:.0f}, "
        f"parley {parley_full:.0f}"
    )
    return {
        "raw_sqlite_commits_per_s": round(raw or 0, 1),
        "parley_mail_per_s": round(parley or 0, 1),
        "mail_ratio_vs_raw_sqlite": ratio(parley, raw),
        "bare_group_commit_per_s": round(group or 0, 1),
        "bare_group_commit_ratio_vs_raw_sqlite": ratio(group, raw),
        "raw_sqlite_full_commits_per_s": round(raw_full or 0, 1),
        "parley_mail_full_per_s": round(parley_full or 0, 1),
        "mail_ratio_vs_raw_sqlite_full": ratio(parley_full, raw_full),
        "mail_senders": MAIL_SENDERS,
    }


# -- 3. the REST stack against a bare route --------------------------------------------------------
@contextlib.asynccontextmanager
async def served(home: Path, *, bare: bool) -> AsyncIterator[HubProcess]:
    server = HubProcess(home, None, bare=bare, serving="hub")
    try:
        await server.start()
        yield server
    finally:
        server.stop()


async def load_window(url: str, tokens: list[str], recipients: list[str], seconds: float) -> float:
    """Requests per second of one load process keeping ``HTTP_CONCURRENCY`` requests in flight."""
    job = {
        "sender_tokens": tokens,
        "recipients": recipients,
        "start_at": time.time() + 0.5,
        "duration": seconds,
        "grace": 30.0,
        "cpus": None,
    }
    results = await run_load(url, 1, HTTP_CONCURRENCY, job)
    errors = sum(r["errors"] for r in results)
    if errors:
        raise RuntimeError(f"{errors} requests failed: {results[0]['last_error']}")
    return sum(r["ok"] for r in results) / max(r["elapsed_s"] for r in results)


async def agents_of(server: HubProcess, prefix: str, count: int) -> dict[str, str]:
    op = {"Authorization": f"Bearer {server.operator_token}"}
    async with httpx.AsyncClient(base_url=server.url, headers=op, timeout=30) as client:
        return await create_agents(client, prefix, count)


async def measure_http(plan: Plan, home: Path) -> dict[str, Any]:
    bare: list[float] = []
    parley: list[float] = []
    async with (
        served(home / "bare", bare=True) as reference,
        served(home / "rest", bare=False) as hub,
    ):
        senders = await agents_of(hub, "hs-", MAIL_AGENTS)
        recipients = list(await agents_of(hub, "hr-", MAIL_AGENTS))
        tokens = list(senders.values())
        await load_window(reference.url, tokens, recipients, 0.5)
        await load_window(hub.url, tokens, recipients, 0.5)
        progress(f"http: {plan.http_rounds} rounds of {plan.http_s:g}s each, alternating")
        for _ in range(plan.http_rounds):
            bare.append(await load_window(reference.url, tokens, recipients, plan.http_s))
            parley.append(await load_window(hub.url, tokens, recipients, plan.http_s))
    bare_rps, parley_rps = median(bare), median(parley)
    progress(f"http: bare {bare_rps:.0f} req/s, parley {parley_rps:.0f} req/s")
    return {
        "bare_http_rps": round(bare_rps or 0, 1),
        "parley_rest_rps": round(parley_rps or 0, 1),
        "rest_ratio_vs_bare": ratio(parley_rps, bare_rps),
        "http_concurrency": HTTP_CONCURRENCY,
    }


# -- 4. MCP against REST -------------------------------------------------------------------------
Sender = Callable[[int], Awaitable[None]]


async def rate_of(
    server: HubProcess, senders: list[Sender], per_sender: int
) -> tuple[float, float]:
    """Sends per second with ``senders`` sending at once, and the hub's CPU ms per send."""
    cpu_before = process_cpu_seconds(server.pid) or 0.0
    began = time.perf_counter()

    async def loop(send: Sender) -> None:
        for n in range(per_sender):
            await send(n)

    await asyncio.gather(*(loop(s) for s in senders))
    elapsed = time.perf_counter() - began
    cpu = (process_cpu_seconds(server.pid) or 0.0) - cpu_before
    total = per_sender * len(senders)
    return total / elapsed, 1000 * cpu / total


async def measure_mcp(plan: Plan, home: Path) -> dict[str, Any]:
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    async with served(home / "mcp", bare=False) as server:
        tokens = await agents_of(server, "m-", MCP_CLIENTS)
        names = list(tokens)
        async with contextlib.AsyncExitStack() as stack:
            mcp_clients = [
                await stack.enter_async_context(mcp_session(server.url, tokens[n])) for n in names
            ]
            rest_clients = [
                await stack.enter_async_context(
                    httpx.AsyncClient(
                        base_url=server.url,
                        headers={"Authorization": f"Bearer {tokens[n]}"},
                        timeout=30,
                    )
                )
                for n in names
            ]

            def mail(i: int, n: int) -> dict[str, Any]:
                """The same message over both: client ``i`` mails the next client's agent."""
                to = names[(i + 1) % len(names)]
                return {"to": to, "kind": "notice", "subject": "bench", "body": f"load {n}"}

            def mcp_sender(i: int) -> Sender:
                async def send(n: int) -> None:
                    result_data(await mcp_clients[i].call_tool("send_message", mail(i, n)))

                return send

            def rest_sender(i: int) -> Sender:
                async def send(n: int) -> None:
                    response = await rest_clients[i].post("/v1/mail", json=mail(i, n))
                    response.raise_for_status()

                return send

            await rate_of(server, [mcp_sender(0)], 20)
            await rate_of(server, [rest_sender(0)], 20)
            progress(f"mcp: {plan.mcp_rounds} rounds, alternating MCP and REST")
            per_client = max(1, plan.mcp_sends // MCP_CLIENTS)
            for _ in range(plan.mcp_rounds):
                for kind, make in (("mcp", mcp_sender), ("rest", rest_sender)):
                    rate, cpu = await rate_of(server, [make(0)], plan.mcp_sends)
                    add(f"{kind}_seq_rate", rate)
                    add(f"{kind}_seq_cpu", cpu)
                    rate, cpu = await rate_of(
                        server, [make(i) for i in range(MCP_CLIENTS)], per_client
                    )
                    add(f"{kind}_rate", rate)
                    add(f"{kind}_cpu", cpu)
    m = {name: median(values) for name, values in figures.items()}
    progress(
        f"mcp: {m['mcp_rate']:.0f} sends/s over MCP, {m['rest_rate']:.0f} over REST "
        f"({MCP_CLIENTS} clients)"
    )
    return {
        "mcp_send_per_s": round(m["mcp_rate"] or 0, 1),
        "rest_send_per_s": round(m["rest_rate"] or 0, 1),
        "mcp_ratio_vs_rest": ratio(m["mcp_rate"], m["rest_rate"]),
        "mcp_sequential_send_per_s": round(m["mcp_seq_rate"] or 0, 1),
        "rest_sequential_send_per_s": round(m["rest_seq_rate"] or 0, 1),
        "mcp_sequential_ratio_vs_rest": ratio(m["mcp_seq_rate"], m["rest_seq_rate"]),
        "mcp_hub_cpu_ms_per_send": ms(m["mcp_cpu"]),
        "rest_hub_cpu_ms_per_send": ms(m["rest_cpu"]),
        "mcp_clients": MCP_CLIENTS,
    }


# -- driver ----------------------------------------------------------------------------------------
SECTIONS = {
    "turns": measure_turns,
    "mail": measure_mail,
    "http": measure_http,
    "mcp": measure_mcp,
}
TARGETS = {
    "turn_ratio_vs_autogen": ("<=", 0.5),
    # Mail is targeted where a commit waits for the disk (synchronous=FULL); at NORMAL a commit
    # does not, and the ratio is reported, not targeted.
    "mail_ratio_vs_raw_sqlite_full": (">=", 1.5),
    "rest_ratio_vs_bare": (">=", 0.35),
    "mcp_ratio_vs_rest": (">=", 0.5),
}
RATIOS = (
    "turn_ratio_vs_autogen",
    "mail_ratio_vs_raw_sqlite_full",
    "mail_ratio_vs_raw_sqlite",
    "rest_ratio_vs_bare",
    "mcp_ratio_vs_rest",
)


def targets_met(result: dict[str, Any]) -> dict[str, bool | None]:
    met: dict[str, bool | None] = {}
    for name, (op, bound) in TARGETS.items():
        value = result.get(name)
        met[name] = None if value is None else (value <= bound if op == "<=" else value >= bound)
    return met


async def run(plan: Plan, only: list[str]) -> dict[str, Any]:
    load_before = load_average()
    began = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="parley-bench-compare-"))
    figures: dict[str, Any] = {}
    try:
        for name, section in SECTIONS.items():
            if not only or name in only:
                figures.update(await section(plan, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result: dict[str, Any] = {
        "bench": "compare",
        "quick": plan.quick,
        **{name: figures.get(name) for name in RATIOS},
        "targets_met": targets_met(figures),
        **figures,
        "elapsed_s": round(time.perf_counter() - began, 1),
        "load_avg_before": load_before,
        "load_avg_after": load_average(),
        "machine": machine_description(),
    }
    return result


def table(result: dict[str, Any]) -> str:
    lines = []
    for name in RATIOS:
        if name not in TARGETS:
            lines.append(f"{name:>29}: {result[name]}  (reported, no target)")
            continue
        op, bound = TARGETS[name]
        met = result["targets_met"][name]
        mark = "n/a" if met is None else ("met" if met else "MISSED")
        lines.append(f"{name:>29}: {result[name]}  (target {op} {bound}: {mark})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    raw = list(sys.argv[1:] if argv is None else argv)
    only = []
    while "--only" in raw:
        at = raw.index("--only")
        only.append(raw[at + 1])
        del raw[at : at + 2]
    unknown = [name for name in only if name not in SECTIONS]
    if unknown:
        raise SystemExit(f"--only takes one of {', '.join(SECTIONS)}; not {unknown[0]!r}")
    args = parse_args(__doc__, raw)
    if args.backend != "sqlite":
        raise SystemExit("the comparison runs on SQLite: its targets are set there")
    plan = make_plan(args)
    run_main(args, lambda: run(plan, only), table)


if __name__ == "__main__":
    main()
