"""The process's Prometheus metrics, served on ``GET /metrics``.

``Metrics`` holds two registries. ``registry``: what this process did — jobs by how they
ended, model calls (time, tokens, cost in dollars, failures per model), tool runs (outcome,
time), feedback on answers (``opsloop_feedback_total{value}``, fed by
``bot.slack.feedback``), alerts received and the investigations they started
(``bot.slack.alert_webhook``, ``bot.turns.alerts``), the time to answer Slack, the event loop's lag,
``opsloop_redis_up``, and this process's admission control (jobs running here, its limit,
the jobs it left queued for lack of room: ``watch_jobs``). ``live``: what the whole
workspace has open right now (live jobs, pending approvals), read from Redis at each scrape
and left out when Redis does not answer rather than shown stale.

Who feeds them: the Slack edge's job reporter (``bot.slack.notifier``: jobs, model
calls, tools), its transports (``bot.slack.http``, ``bot.slack.socket``: ack time and the
scrape), and ``watch_loop`` (loop lag), started by the composition root
(``bot.service``), which also hands ``watch_jobs`` the process's job counts
(``bot.turns.background``). Nothing here knows Slack or Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LAG_PROBE_S = 0.05
# Sub-second waits: the time to answer Slack, how late the event loop runs a timer.
FAST_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        histogram = partial(Histogram, registry=self.registry)
        self.jobs = counter("opsloop_jobs", "Jobs by final status", ["status"])
        self.model_calls = counter("opsloop_model_calls", "Model calls")
        self.model_errors = counter(
            "opsloop_model_errors",
            "Model calls that failed (after the client's own retries)",
            ["model"],
        )
        self.model_seconds = histogram(
            "opsloop_model_seconds",
            "Time of each model call, to its last byte",
            ["model"],
            buckets=(0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
        )
        self.model_tokens = counter(
            "opsloop_model_tokens",
            "Tokens the provider reported: prompt (cached included), cached, completion",
            ["model", "kind"],
        )
        self.model_cost = counter(
            "opsloop_model_cost_usd",
            "What model calls cost in US dollars, as priced by OPSLOOP_PRICES or the price "
            "table (calls of a model without a price are counted in tokens only)",
            ["model"],
        )
        self.tools = counter("opsloop_tool_executions", "Tool executions", ["tool", "outcome"])
        self.tool_seconds = histogram(
            "opsloop_tool_seconds",
            "Time of each tool run",
            ["tool"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.feedback = counter(
            "opsloop_feedback",
            "Feedback buttons pressed on answers (positive or negative), any job, any age",
            ["value"],
        )
        self.alerts_received = counter(
            "opsloop_alerts_received",
            "Alert notifications received on /alerts/alertmanager, by the group's status "
            "(firing, resolved) or why refused (unauthorized, bad, too_large, unroutable, "
            "unavailable)",
            ["status"],
        )
        self.alert_investigations = counter(
            "opsloop_alert_investigations",
            "Alert groups posted: an investigation started, posted only (the route does not "
            "investigate), or storm limited (past OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR or "
            "the daily caps)",
            ["outcome"],
        )
        self.otel_spans_dropped = counter(
            "opsloop_otel_spans_dropped",
            "OpenTelemetry spans lost: the export queue was full or the export failed",
        )
        self.redis_up = gauge("opsloop_redis_up", "1 when Redis answered this scrape")
        # Admission control (``bot.turns.background``): read from the process at each scrape.
        self.running_jobs = gauge(
            "opsloop_running_jobs",
            "Jobs this process runs now (at most its limit, plus a small reserve for resumes)",
        )
        self.max_running_jobs = gauge(
            "opsloop_max_running_jobs",
            "Jobs this process runs at once before it leaves new ones queued "
            "(OPSLOOP_MAX_RUNNING_JOBS)",
        )
        self.waiting_jobs = gauge(
            "opsloop_jobs_waiting_for_room",
            "Jobs this process left queued for lack of room and takes when it has some",
        )
        self.queued_for_room = counter(
            "opsloop_jobs_queued_for_room",
            "Jobs this process left queued (in Redis, for any process with room) because "
            "it ran its limit",
        )
        self._jobs_here: Callable[[], Mapping[str, int]] | None = None
        # Read from Redis at each scrape (the whole workspace, every process); absent
        # when Redis does not answer rather than a stale figure.
        self.live = CollectorRegistry()
        self.live_jobs = Gauge(
            "opsloop_live_jobs", "Jobs queued, running or awaiting approval", registry=self.live
        )
        self.pending_approvals = Gauge(
            "opsloop_pending_approvals", "Approval cards waiting for a decision", registry=self.live
        )
        self.ack = histogram("opsloop_ack_seconds", "Time to answer Slack", buckets=FAST_BUCKETS)
        self.loop_lag = histogram(
            "opsloop_event_loop_lag_seconds",
            "How late a 50 ms timer fires (time everything waits for the event loop)",
            buckets=FAST_BUCKETS,
        )

    def watch_jobs(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Read the process's job counts at each scrape: ``counts()`` gives ``running``,
        ``limit`` and ``waiting`` (``Tasks.counts``)."""
        self._jobs_here = counts
        self.running_jobs.set_function(lambda: counts()["running"])
        self.max_running_jobs.set_function(lambda: counts()["limit"])
        self.waiting_jobs.set_function(lambda: counts()["waiting"])

    def jobs_here(self) -> dict[str, int] | None:
        """The process's job counts (for ``/healthz``), or None when nobody gave them."""
        return dict(self._jobs_here()) if self._jobs_here is not None else None

    def scrape(self, live: tuple[int, int] | None) -> bytes:
        """The body of one scrape. ``live``: the workspace's live jobs and pending
        approvals as Redis just said, or None when it did not answer."""
        if live is None:
            self.redis_up.set(0)
            return generate_latest(self.registry)
        self.redis_up.set(1)
        self.live_jobs.set(live[0])
        self.pending_approvals.set(live[1])
        return generate_latest(self.registry) + generate_latest(self.live)


async def watch_loop(metrics: Metrics) -> None:
    """Measure how late a short timer fires, until cancelled (``opsloop_event_loop_lag``)."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(LAG_PROBE_S)
        metrics.loop_lag.observe(max(0.0, loop.time() - started - LAG_PROBE_S))
