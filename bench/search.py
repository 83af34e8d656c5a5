"""Search (mail and channel messages): how long one search takes over 10,000 messages.

A hub runs in the bench process on a fresh data root (on PostgreSQL a throwaway database). The
bench stores 10,000 messages through the service layer — half of them mail between eight
agents, half posts in four group channels (an agent's post in a group starts no task) — each a
dozen words drawn from a vocabulary of 2,000, so a one-word query matches a few hundred
messages. It then times ``Search.find`` (the one service call the REST route, the CLI and the
web page make) for queries of one and two words, alternately as the operator (every message)
and as an agent (its own mail and its channels: the read rules are part of the statement).

* ``search_p50_ms`` / ``search_p99_ms``: one search, the store's full-text index included
  (FTS5 on SQLite, ``tsvector`` with a GIN index on PostgreSQL), newest 50 hits.
* ``seed_s``: time to store the messages (not a target). On PostgreSQL the two tables are then
  analyzed, as autovacuum would within a minute.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

from common import (
    compare_backends,
    distribution,
    parse_args,
    run_main,
)
from hub_server import progress

MESSAGES = 10_000
AGENTS = 8
GROUPS = 4
VOCABULARY = 2_000
WORDS_PER_MESSAGE = 12
QUERIES = 400
QUICK_QUERIES = 100
BATCH = 50
TARGETS = {"search_p50_ms": 50.0}


@dataclass(frozen=True)
class Plan:
    backends: tuple[str, ...]
    quick: bool
    queries: int


def vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


async def seed(hub: Any, operator: Any, rng: random.Random, words: list[str]) -> list[Any]:
    """The agents, groups and messages; the agents' principals."""
    from parley.core.mail import SendRequest
    from parley.service.conversations.channels import ChannelSpec
    from parley.service.identity import AgentSpec

    agents = []
    for i in range(AGENTS):
        created = await hub.identity.create_agent(
            operator, AgentSpec(id=f"agent-{i}", accepts_channels_from=["*"])
        )
        agents.append(created.principal)
    groups = []
    for g in range(GROUPS):
        members = [a.id for a in agents if (int(a.id.split("-")[1]) + g) % 2 == 0]
        groups.append(
            await hub.channels.create(operator, ChannelSpec(name=f"g{g}", members=members))
        )

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(WORDS_PER_MESSAGE))

    async def one(n: int) -> None:
        if n % 2 == 0:
            sender, recipient = rng.sample(agents, 2)
            request = SendRequest(to=recipient.id, kind="notice", subject=text()[:40], body=text())
            await hub.mail.send(sender, request)
        else:
            group = groups[n % GROUPS]
            poster = next(a for a in agents if a.id in group.members)
            await hub.channels.post(poster, group.id, text())

    for start in range(0, MESSAGES, BATCH):
        await asyncio.gather(*(one(n) for n in range(start, min(MESSAGES, start + BATCH))))
    await hub.tasks.wait_idle()
    return agents


async def section(hub: Any, runtimes: Any, operator: Any, plan: Plan) -> dict[str, Any]:
    from parley.core.search import SearchQuery

    rng = random.Random(7)
    words = vocabulary(rng)
    began = time.perf_counter()
    agents = await seed(hub, operator, rng, words)
    seed_s = time.perf_counter() - began
    progress(f"stored {MESSAGES} messages in {seed_s:.1f} s")
    if hub.store.dialect == "postgresql":
        # PostgreSQL's autovacuum analyzes a table within a minute of a tenth of it changing;
        # a bench that queries right after seeding analyzes itself, or the planner still takes
        # the tables for empty and reads every row instead of the GIN index.
        async with hub.store.read() as tx:
            for table in ("messages", "channel_messages"):
                await tx.executor.execute(f"ANALYZE {table}", [], [])
    samples: list[float] = []
    hits: list[int] = []
    for n in range(plan.queries):
        text = " ".join(rng.sample(words, 1 + n % 2))
        viewer = operator if n % 2 == 0 else agents[n % AGENTS]
        start = time.perf_counter()
        found = await hub.search.find(viewer, SearchQuery(text=text))
        samples.append((time.perf_counter() - start) * 1000)
        hits.append(len(found))
    one_word = [h for i, h in enumerate(hits) if i % 2 == 0]
    return {
        **distribution("search", samples),
        "queries": plan.queries,
        "messages": MESSAGES,
        "hits_per_one_word_query_mean": round(sum(one_word) / max(1, len(one_word)), 1),
        "seed_s": round(seed_s, 1),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, both=True)
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    plan = Plan(backends, args.quick, QUICK_QUERIES if args.quick else QUERIES)

    async def measure() -> dict[str, Any]:
        return await compare_backends(
            plan,
            [section],
            ["search_p50_ms", "search_p99_ms"],
            per_backend=["search_p50_ms"],
            home_prefix="parley-bench-search-",
            database_prefix="parley_bench_search_",
            targets=TARGETS,
        )

    run_main(args, measure)


if __name__ == "__main__":
    main()
