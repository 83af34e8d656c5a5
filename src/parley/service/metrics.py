"""The hub's Prometheus metrics (P5): turns, their latency and failures, mail, live streams and
the store's write batches.

Each hub has its own registry, never the library's global one: several hubs share a process in
tests and embedded use, and each ``/metrics`` must show its own hub's counts. The counters are
fed from the edges the hub already has (the event log, the invocation record of a turn, the
store's writer, the SSE streams), after commit, so a rolled-back transaction counts nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from parley.core.events import Event
    from parley.core.usage import UsageRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format."""

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class HubMetrics:
    """The metrics of one hub, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turns = Counter(
            "parley_turns",
            "Runtime calls for a turn, by runtime kind and outcome (accepted, rejected, failed).",
            ["runtime", "outcome"],
            registry=r,
        )
        self.turn_failures = Counter(
            "parley_turn_failures",
            "Turns not accepted, by runtime kind and reason code (timeout, new_message, ...).",
            ["runtime", "reason"],
            registry=r,
        )
        self.provider_seconds = Histogram(
            "parley_turn_provider_seconds",
            "Time a turn waited for its runtime (the model, the agent), by runtime kind.",
            ["runtime"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.hub_seconds = Histogram(
            "parley_turn_hub_seconds",
            "Time the hub itself spent on a turn (prompt build and persist), by runtime kind.",
            ["runtime"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.task_ends = Counter(
            "parley_tasks_finished",
            "Finished discussion tasks, by end reason (unanimous, max_rounds, failed, ...).",
            ["reason"],
            registry=r,
        )
        self.mail_sent = Counter(
            "parley_mail_sent", "Mail messages stored for a recipient (copies counted).", registry=r
        )
        self.mail_delivered = Counter(
            "parley_mail_delivered", "Mail messages delivered to their recipient.", registry=r
        )
        self.events = Counter(
            "parley_events", "Events recorded in the event log, by type.", ["type"], registry=r
        )
        self.sse_subscribers = Gauge(
            "parley_sse_subscribers", "Open server-sent event streams.", registry=r
        )
        self.tokens = Counter(
            "parley_tokens",
            "Tokens runtimes reported, by agent, model and kind (input, output, cache_read, "
            "cache_write).",
            ["agent", "model", "kind"],
            registry=r,
        )
        self.cost = Counter(
            "parley_cost_usd",
            "Cost in US dollars that runtimes stated (Claude Code does), by agent and model.",
            ["agent", "model"],
            registry=r,
        )
        self.usage_turns = Counter(
            "parley_usage_turns",
            "Runtime calls that reported usage, by agent and model.",
            ["agent", "model"],
            registry=r,
        )
        self.writer_batch = Histogram(
            "parley_store_write_batch_jobs",
            "Write jobs committed together in one store transaction.",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )

        # Each labelled series once: ``labels()`` takes the metric's lock and builds the key on
        # every call, and a turn counts several series after its commit.
        self._series: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _labelled(self, metric: Any, *values: str) -> Any:
        key = (id(metric), values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(*values)
        return series

    def event_recorded(self, event: Event) -> None:
        """Count a committed event; mail and task ends are read from it."""
        self._labelled(self.events, event.type).inc()
        if event.type == "mail.sent":
            self.mail_sent.inc(_count(event.payload.get("recipients"), 1))
        elif event.type == "mail.delivered":
            self.mail_delivered.inc(_count(event.payload.get("ids"), 1))
        elif event.type == "task.finished":
            reason = str(event.payload.get("end_reason") or "unknown")
            self._labelled(self.task_ends, reason).inc()

    def turn_recorded(
        self, outcome: str, reason: str | None, timings: dict[str, float], route: str
    ) -> None:
        """Count one committed turn from its invocation record (C13)."""
        runtime = route.split(":", 1)[0] or "unknown"
        self._labelled(self.turns, runtime, outcome).inc()
        if outcome != "accepted":
            self._labelled(self.turn_failures, runtime, reason or outcome).inc()
        if "provider_wait_ms" in timings:
            wait_s = timings["provider_wait_ms"] / 1000
            self._labelled(self.provider_seconds, runtime).observe(wait_s)
        hub_ms = timings.get("prompt_build_ms", 0.0) + timings.get("persist_ms", 0.0)
        self._labelled(self.hub_seconds, runtime).observe(hub_ms / 1000)

    def usage_recorded(self, record: UsageRecord) -> None:
        """Count one committed usage record (``service/usage.py``)."""
        agent, model = record.agent_id, record.model
        self._labelled(self.usage_turns, agent, model).inc()
        for kind, value in (
            ("input", record.input_tokens),
            ("output", record.output_tokens),
            ("cache_read", record.cache_read_tokens),
            ("cache_write", record.cache_write_tokens),
        ):
            if value:
                self._labelled(self.tokens, agent, model, kind).inc(value)
        if record.cost_usd:
            self._labelled(self.cost, agent, model).inc(record.cost_usd)

    def batch_committed(self, jobs: int) -> None:
        self.writer_batch.observe(jobs)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


def _count(value: object, default: int) -> int:
    return len(value) if isinstance(value, list | tuple) else default
