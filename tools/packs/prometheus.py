"""The ``prometheus`` pack: PromQL queries, the server's alerts and its scrape targets.

All four tools are read-only. ``PROMETHEUS_URL`` is the server's base URL; a path prefix
(``https://ops.example/prometheus``) and ``user:password@`` basic auth are kept, and the
password is never shown. Answers are summaries, never dumps: label sets in PromQL form
(labels every series shares said once), values as short numbers, at most ``MAX_SERIES``
series, a range query as min/avg/max/first/last per series.

The HTTP client (``Backend``) and the small formatting helpers live in
``tools.packs.backend``, shared with the ``alertmanager`` pack.
The summaries are pure functions of the API's answer (``query_summary``,
``range_summary``, ``alerts_summary``, ``targets_summary``), so recorded answers can be
rendered exactly (``tests/tools/packs/golden``).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field

from bot.agent.tools import Tool
from bot.errors import ToolError
from tools.base import tool
from tools.packs import Pack, PackConfig
from tools.packs.backend import (
    TOOL_TIMEOUT_S,
    Backend,
    ago,
    annotation,
    backend_pack,
    clip,
    duration,
    iso,
    labels_text,
    listing,
    number,
    parse_time,
    plural,
    series_name,
)

MAX_SERIES = 20
MAX_ALERTS = 30
MAX_DOWN_TARGETS = 20
MAX_LISTED_TARGETS = 30  # up to this many, every target is named
MAX_JOBS = 40
MAX_RANGE_MINUTES = 7 * 24 * 60
AUTO_POINTS = 240  # the default step aims at about this many points...
MIN_AUTO_STEP_S = 15  # ...but no finer than a usual scrape interval
MAX_POINTS = 1000  # a finer step is raised to stay under this (Prometheus allows 11,000)

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_STEP_PATTERN = r"^\s*(\d+(\.\d+)?|((\d+)(ms|s|m|h|d|w|y))+)\s*$"

Step = (
    Annotated[float, Field(gt=0, le=MAX_RANGE_MINUTES * 60)]
    | Annotated[str, Field(pattern=_STEP_PATTERN, max_length=20)]
    | None
)
Query = Annotated[str, Field(min_length=1, max_length=4000)]
Minutes = Annotated[int, Field(ge=1, le=MAX_RANGE_MINUTES)]


def build(config: PackConfig) -> Pack:
    """The pack against ``PROMETHEUS_URL``; ``ConfigError`` when it is missing or bad."""
    return backend_pack(
        "prometheus", config.prometheus_url, variable="PROMETHEUS_URL", tools_of=prometheus_tools
    )


def prometheus_tools(backend: Backend) -> list[Tool]:
    """The four tools over one backend (tests build them with short timeouts)."""
    prometheus = Prometheus(backend)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def prometheus_query(query: Query) -> str:
        """Run an instant PromQL query (the value now) and summarise the result.

        Each series is one line: its labels in PromQL form and its value (labels all
        series share are said once, in the first line); at most 20 series are listed.
        Use topk(), sum by (...) or label filters to narrow a query.

        Args:
            query: A PromQL expression, e.g. ``up == 0`` or ``topk(5, node_load1)``.
        """
        return await prometheus.query(query)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def prometheus_query_range(query: Query, minutes: Minutes = 60, step: Step = None) -> str:
        """Run a PromQL query over the last minutes; summarise each series as
        min/avg/max/first/last and the number of points (never the raw points).

        At most 20 series are listed. A step that would give more than 1000 points per
        series is raised (the answer says so).

        Args:
            query: A PromQL expression, e.g. ``rate(http_requests_total[5m])``.
            minutes: How far back to look, 1 to 10080 (7 days). Default 60.
            step: Resolution: a duration such as "30s", "5m", "1h30m", or a number of
                seconds (60 or "60"). Default: about 240 points over the window, but no
                finer than 15s.
        """
        return await prometheus.query_range(query, minutes, step)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def prometheus_alerts() -> str:
        """List the alerts Prometheus's rules have firing or pending, firing first and
        the most severe first, with labels, since when, and each one's summary annotation
        (at most 30)."""
        return await prometheus.alerts()

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def prometheus_targets() -> str:
        """Scrape targets by job and instance with their health, the ones not up first
        with their last scrape error; when there are more than 30, the up/down counts
        per job and only the targets not up (at most 20)."""
        return await prometheus.targets()

    return [prometheus_query, prometheus_query_range, prometheus_alerts, prometheus_targets]


class Prometheus:
    """The HTTP API v1 calls and their summaries."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def _data(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        """The answer's ``data`` and its warnings (as lines to append)."""
        body = await self.backend.call("GET", path, params=params)
        if not isinstance(body, dict) or body.get("status") != "success":
            raise ToolError(f"prometheus answered {path} without success: {clip(str(body))}")
        warnings = [f"warning: {clip(str(w))}" for w in body.get("warnings") or ()]
        data = body.get("data")
        return (data if isinstance(data, dict) else {}), warnings

    async def query(self, query: str) -> str:
        data, warnings = await self._data("/api/v1/query", {"query": query})
        return "\n".join([query_summary(query, data), *warnings])

    async def query_range(self, query: str, minutes: int, step: float | str | None) -> str:
        window = minutes * 60
        asked = parse_step(step) if step is not None else None
        chosen = asked or max(math.ceil(window / AUTO_POINTS), MIN_AUTO_STEP_S)
        floor = window / MAX_POINTS
        note = ""
        if chosen < floor:
            chosen = math.ceil(floor)
            note = f" (step raised from {duration(asked or 0)} to stay under {MAX_POINTS} points)"
        end = time.time()
        start = end - (window // chosen) * chosen  # points land on now: "last" is current
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        params["step"] = f"{chosen:g}"
        data, warnings = await self._data("/api/v1/query_range", params)
        text = range_summary(query, data.get("result") or [], window=window, step=chosen, note=note)
        return "\n".join([text, *warnings])

    async def alerts(self) -> str:
        data, _ = await self._data("/api/v1/alerts")
        return alerts_summary(data.get("alerts") or [], datetime.now(UTC))

    async def targets(self) -> str:
        data, _ = await self._data("/api/v1/targets", {"state": "active"})
        return targets_summary(data.get("activeTargets") or [], datetime.now(UTC))


def query_summary(query: str, data: Mapping[str, Any]) -> str:
    """An instant query's ``data`` as ``prometheus_query`` answers it."""
    kind = data.get("resultType")
    result: Any = data.get("result") or []
    if kind == "scalar":
        return f"scalar {number(result[1])} at {iso(float(result[0]))}"
    if kind == "string":
        return f"string {json.dumps(clip(str(result[1])))} at {iso(float(result[0]))}"
    if kind == "vector":
        at = f" at {iso(float(result[0]['value'][0]))}" if result else ""
        head = f"vector, {plural(len(result), 'series')}{at}"
        text = _series_listing(head, result, _sample, _by_value if _unordered(query) else None)
    elif kind == "matrix":
        rank = _by_max if _unordered(query) else None
        text = _series_listing(f"matrix, {plural(len(result), 'series')}", result, _summary, rank)
    else:
        raise ToolError(f"prometheus answered an unknown result type {kind!r}")
    if not result:
        text += " (no data: check the metric name and label filters)"
    return text


def range_summary(
    query: str, result: Sequence[Mapping[str, Any]], *, window: float, step: float, note: str = ""
) -> str:
    """A range query's ``result`` as ``prometheus_query_range`` answers it."""
    head = f"{plural(len(result), 'series')} over the last {duration(window)}, "
    head += f"step {duration(step)}{note}"
    if not result:
        head += " (no data: check the metric name, label filters and the window)"
    return _series_listing(head, result, _summary, _by_max if _unordered(query) else None)


def alerts_summary(alerts: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """``/api/v1/alerts``' alerts as ``prometheus_alerts`` answers: firing first."""
    current = [a for a in alerts if a.get("state") in ("firing", "pending")]
    if not current:
        return "no alerts firing or pending"
    current.sort(
        key=lambda a: (a.get("state") != "firing", severity_rank(a), str(a.get("activeAt", "")))
    )
    firing = sum(1 for a in current if a.get("state") == "firing")
    lines = []
    for alert in current:
        labels = dict(alert.get("labels") or {})
        name = labels.pop("alertname", "?")
        line = f"{alert['state']} {name}{labels_text(labels)}"
        if since := parse_time(alert.get("activeAt")):
            line += f" since {iso(since.timestamp())} ({ago(since, now)})"
        if alert.get("value") is not None:
            line += f" value {number(alert['value'])}"
        if text := annotation(alert.get("annotations")):
            line += f": {text}"
        lines.append(line)
    head = f"{plural(len(current), 'alert')}: {firing} firing, {len(current) - firing} pending"
    return listing(head, lines, MAX_ALERTS)


# The usual ``severity`` label values, most urgent first; an alert without one (or with
# another value) ranks as a warning, and ``none`` (Watchdog, the dead man's switch) last.
_SEVERITY_RANK = {
    **dict.fromkeys(("critical", "page", "emergency"), 0),
    **dict.fromkeys(("high", "error", "major"), 1),
    **dict.fromkeys(("warning", "warn", "medium", "ticket"), 2),
    **dict.fromkeys(("minor", "low", "info"), 3),
    "none": 4,
}


def severity_rank(alert: Mapping[str, Any]) -> int:
    """Where an alert's ``severity`` label puts it: 0 for critical/page … 4 for none."""
    severity = str((alert.get("labels") or {}).get("severity", "")).lower()
    return _SEVERITY_RANK.get(severity, 2)


def targets_summary(targets: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """What Prometheus scrapes and how that goes. Up to ``MAX_LISTED_TARGETS`` targets:
    each one by job and instance with its health, the unhealthy first with their last
    scrape error. More: the counts per job and only the unhealthy ones."""
    if not targets:
        return "no active scrape targets"
    health = {"up": 0, "down": 0, "unknown": 0}
    jobs: dict[str, list[int]] = {}
    rows: list[tuple[str, str, str, Mapping[str, Any]]] = []
    for target in targets:
        state = str(target.get("health") or "unknown")
        state = state if state in health else "unknown"
        health[state] += 1
        labels = target.get("labels") or {}
        job = str(labels.get("job") or target.get("scrapePool") or "?")
        instance = str(labels.get("instance") or target.get("scrapeUrl") or "?")
        counts = jobs.setdefault(job, [0, 0])
        counts[0] += state == "up"
        counts[1] += 1
        rows.append((state, job, instance, target))
    rows.sort(key=lambda row: (_HEALTH_ORDER[row[0]], row[1], row[2]))
    states = ", ".join(f"{n} {state}" for state, n in health.items() if n or state == "up")
    head = f"{plural(len(targets), 'active target')} in {plural(len(jobs), 'job')}: {states}"
    state_width = max(len(state) for state, _, _, _ in rows)
    job_width = max(len(job) for _, job, _, _ in rows)

    def line(state: str, job: str, instance: str, target: Mapping[str, Any]) -> str:
        text = f"{state:<{state_width}}  {job:<{job_width}}  {instance}"
        if state == "up":
            return text
        if (last := parse_time(target.get("lastScrape"))) and last.year > 1:
            text += f" (last scrape {ago(last, now)})"
        else:
            text += " (never scraped yet)"
        error = str(target.get("lastError") or "")
        return f"{text}: {clip(error)}" if error else text

    if len(rows) <= MAX_LISTED_TARGETS:
        return "\n".join([head, *(line(*row) for row in rows)])
    per_job = [f"{job} {up}/{total} up" for job, (up, total) in sorted(jobs.items())]
    shown_jobs = ", ".join(per_job[:MAX_JOBS])
    if len(per_job) > MAX_JOBS:
        shown_jobs += f", … {len(per_job) - MAX_JOBS} more jobs"
    unhealthy = [line(*row) for row in rows if row[0] != "up"]
    text = f"{head}\nby job: {shown_jobs}"
    if unhealthy:
        text += "\n" + listing("not up:", unhealthy, MAX_DOWN_TARGETS)
    else:
        text += "\nevery target is up"
    return text


_HEALTH_ORDER = {"down": 0, "unknown": 1, "up": 2}


def _series_listing(
    head: str,
    result: Sequence[Mapping[str, Any]],
    line: Callable[[str, Mapping[str, Any]], str],
    rank: Callable[[Mapping[str, Any]], float] | None = None,
) -> str:
    """A line per series (at most ``MAX_SERIES``); labels every series shares are said
    once in the head (``; all match name{job="node"}``) and left out of the lines. When
    there are more than can be shown and ``rank`` is given, the largest are the ones
    shown, largest first: an arbitrary 20 of 300 series would hide the point."""
    if rank is not None and len(result) > MAX_SERIES:
        result = sorted(result, key=lambda series: _descending(rank(series)))
        head += f"; the {MAX_SERIES} largest shown"
    metrics = [dict(series.get("metric") or {}) for series in result]
    common: dict[str, str] = {}
    if len(metrics) > 1:
        first, rest = metrics[0], metrics[1:]
        common = {k: v for k, v in first.items() if all(m.get(k) == v for m in rest)}
    if common:
        head += f"; all match {series_name(common)}"
    lines = [
        line(series_name({k: v for k, v in metric.items() if k not in common}), series)
        for metric, series in zip(metrics, result, strict=True)
    ]
    return listing(head, lines, MAX_SERIES)


# A query whose outermost call orders or picks its series: its order is the answer's.
_ORDERED = re.compile(r"^\s*(sort|sort_desc|sort_by_label|sort_by_label_desc|topk|bottomk)\s*\(")


def _unordered(query: str) -> bool:
    return _ORDERED.match(query) is None


def _descending(value: float) -> tuple[bool, float]:
    return (math.isnan(value), -value if not math.isnan(value) else 0.0)


def _by_value(series: Mapping[str, Any]) -> float:
    try:
        return float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


def _by_max(series: Mapping[str, Any]) -> float:
    real = [float(v) for _, v in series.get("values") or () if not math.isnan(float(v))]
    return max(real) if real else math.nan


def _sample(name: str, series: Mapping[str, Any]) -> str:
    """One instant-vector series: ``labels value``."""
    return f"{name} {number(series['value'][1])}"


def _summary(name: str, series: Mapping[str, Any]) -> str:
    """One matrix series as ``labels: min … avg … max … first … last … (N points)``, or
    ``labels: constant … (N points)``."""
    points = [float(v) for _, v in series.get("values") or ()]
    real = [v for v in points if not math.isnan(v)]
    if not real:
        return f"{name}: {plural(len(points), 'point')}, all NaN"
    if min(real) == max(real) and len(real) == len(points):
        return f"{name}: constant {number(real[0])} ({plural(len(points), 'point')})"
    stats = (
        f"min {number(min(real))} avg {number(sum(real) / len(real))} max {number(max(real))} "
        f"first {number(points[0])} last {number(points[-1])}"
    )
    gaps = f", {len(points) - len(real)} NaN" if len(real) < len(points) else ""
    return f"{name}: {stats} ({plural(len(points), 'point')}{gaps})"


# ---- the HTTP client shared by the prometheus and alertmanager packs -------------------


# ---- formatting helpers -----------------------------------------------------------------


def parse_step(step: float | str) -> float:
    """Seconds from a number or a Prometheus duration (``30s``, ``1h30m``, ``60``)."""
    if isinstance(step, int | float):
        seconds = float(step)
    elif re.fullmatch(r"\s*\d+(\.\d+)?\s*", step):
        seconds = float(step)
    else:
        seconds = sum(int(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(step))
    if not seconds > 0:
        raise ToolError(f"step must be longer than zero, got {step!r}")
    return seconds
