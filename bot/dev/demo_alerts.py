"""The demo's alerting in ``opsloop dev``: what Prometheus and Alertmanager would send the
bot about the demo service "web", through the bot's own webhook.

:class:`AlertSender` is Alertmanager's webhook receiver pointed at the dev bot
(``POST /alerts/alertmanager`` with ``Authorization: Bearer <token>``, the token
``opsloop dev`` generated for this run); it answers what the bot said
(:class:`Delivered`). :func:`notification` is the webhook body Alertmanager sends
(``version: "4"``, ``groupKey``, group and common labels and annotations, each alert with
``summary``, ``description``, ``runbook_url``, ``generatorURL`` and ``fingerprint``).
Both rules' ``runbook_url`` is web's runbook in the demo's runbooks folder, at the address
``opsloop dev`` says that folder is published at (``bot.dev.demo_runbook``), so the bot
puts that runbook in the alert job's first request.

:class:`DemoAlerts` plays the rest:

- :meth:`DemoAlerts.watch` is the demo's Prometheus rule :data:`ERROR_RATE`: it reads
  web's ``/metrics`` every :data:`SCRAPE_S` and fires ``WebErrorRateHigh`` once more than
  5 % of the requests of web's current state fail (a few seconds after it degrades), and
  resolves it once they do not (after a restart); no metrics (web restarting) changes
  nothing. A notification the bot did not take (not 200) is sent again at the next look,
  as Alertmanager retries.
- :meth:`DemoAlerts.fire_by_hand` is the page's "Fire an alert": :data:`LATENCY`, a new
  group each click (its ``click`` label), with what web's metrics say now.

Each alert's ``instance`` is web's address, which changes every run, so a group left
firing by an earlier run (its Redis kept) is not this run's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import httpx

from bot.dev.demo_runbook import WEB_RUNBOOK, runbook_url

log = logging.getLogger(__name__)

ALERTS_PATH = "/alerts/alertmanager"
RECEIVER = "opsloop"
SCRAPE_S = 1.0  # how often the demo's rule reads web's metrics
SEND_TIMEOUT_S = 10.0
NO_END = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt while an alert fires
ERROR_SHARE = 0.05  # the error-rate rule's threshold
SLOW_P95_MS = 1000.0

Status = Literal["firing", "resolved"]


@dataclass(frozen=True, slots=True)
class Rule:
    """An alerting rule about web, as a Prometheus rules file would hold it."""

    name: str
    severity: str
    expr: str
    summary: str
    runbook: str  # its runbook_url


ERROR_RATE = Rule(
    name="WebErrorRateHigh",
    severity="critical",
    expr=(
        'sum(rate(http_requests_total{job="web",code=~"5.."}[1m]))'
        f' / sum(rate(http_requests_total{{job="web"}}[1m])) > {ERROR_SHARE}'
    ),
    summary="web is failing requests",
    runbook=runbook_url(WEB_RUNBOOK),
)
LATENCY = Rule(
    name="WebLatencyHigh",
    severity="warning",
    expr=(
        "histogram_quantile(0.95, sum by (le) "
        f'(rate(http_request_duration_seconds_bucket{{job="web"}}[1m]))) > {SLOW_P95_MS / 1000:g}'
    ),
    summary="web answers slowly",
    runbook=runbook_url(WEB_RUNBOOK),
)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def fingerprint(labels: Mapping[str, str]) -> str:
    """A 16-hex id of an alert by its labels, as Alertmanager's fingerprint is."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def group_key(group_labels: Mapping[str, str]) -> str:
    """Alertmanager's key of a group on its root route: ``{}:{alertname="X", …}``."""
    pairs = ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items()))
    return "{}:{" + pairs + "}"


def describe(rule: Rule, metrics: Mapping[str, Any] | None) -> str:
    """The alert's description: what web's metrics say now (or that they said nothing)."""
    if not metrics:
        return f"{rule.summary}; web's metrics did not answer."
    window = f"{max(1.0, float(metrics.get('window_s') or 0)):.0f} s"
    rate, p95 = metrics.get("error_rate"), metrics.get("p95_ms")
    failed = (
        f"{rate * 100:.0f}% of {metrics.get('requests_last_min', '?')} requests failed"
        if isinstance(rate, int | float)
        else "no request finished"
    )
    slow = f"p95 latency {p95 / 1000:.1f} s" if isinstance(p95, int | float) else "no latency"
    return f"web: {failed} in the last {window}, {slow}, state {metrics.get('state', '?')}."


def notification(
    rule: Rule,
    status: Status,
    *,
    instance: str,
    starts_at: str,
    description: str,
    generator_url: str,
    ends_at: str = NO_END,
    extra_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4) for one alert of ``rule`` on ``instance``,
    grouped by all its labels but ``severity`` and ``job``."""
    labels = {
        "alertname": rule.name,
        "severity": rule.severity,
        "service": "web",
        "job": "web",
        "instance": instance,
        **(extra_labels or {}),
    }
    annotations = {"summary": rule.summary, "description": description, "runbook_url": rule.runbook}
    grouped = {k: v for k, v in labels.items() if k not in ("severity", "job")}
    return {
        "version": "4",
        "groupKey": group_key(grouped),
        "truncatedAlerts": 0,
        "status": status,
        "receiver": RECEIVER,
        "groupLabels": grouped,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": "http://alertmanager.example.com:9093",
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": annotations,
                "startsAt": starts_at,
                "endsAt": ends_at if status == "resolved" else NO_END,
                "generatorURL": generator_url,
                "fingerprint": fingerprint(labels),
            }
        ],
    }


@dataclass(frozen=True, slots=True)
class Delivered:
    """What the bot answered a notification: its HTTP status (0: no answer) and the
    ``outcome`` it named (``opened``, ``repeat``, …) or its error."""

    status: int
    outcome: str

    @property
    def taken(self) -> bool:
        return self.status == 200


class AlertSender:
    """Alertmanager's webhook receiver for the dev bot, with its bearer token."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self._headers = {"Authorization": f"Bearer {token}"}
        self._http = httpx.AsyncClient(trust_env=False, timeout=SEND_TIMEOUT_S)

    async def send(self, body: Mapping[str, Any]) -> Delivered:
        try:
            response = await self._http.post(self.url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            return Delivered(0, type(exc).__name__)
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        said = answer.get("outcome") or answer.get("error") if isinstance(answer, dict) else None
        return Delivered(response.status_code, str(said or response.reason_phrase))

    async def close(self) -> None:
        await self._http.aclose()


class DemoAlerts:
    """The demo's Prometheus rule on web and the page's button; see the module docstring.

    ``web_port`` is the demo service's (None: no demo service, when ``OPSLOOP_TOOLS``
    names your own tools: the button still fires, described without metrics)."""

    def __init__(
        self,
        sender: AlertSender,
        web_port: int | None,
        *,
        scrape_s: float = SCRAPE_S,
        now: Callable[[], str] = utc_now,
    ) -> None:
        self.sender = sender
        self.web_port = web_port
        self.scrape_s = scrape_s
        self.now = now
        self.firing_since: str | None = None  # when the rule's alert started, while it fires
        self.clicks = 0
        self._http = httpx.AsyncClient(trust_env=False, timeout=3.0)

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.web_port}" if self.web_port else "web"

    @property
    def metrics_url(self) -> str:
        """What the rules read; also each alert's source link (there is no Prometheus)."""
        return f"http://{self.instance}/metrics" if self.web_port else "http://127.0.0.1/"

    async def metrics(self) -> dict[str, Any] | None:
        """Web's metrics now, or None when it does not answer (restarting, or none)."""
        if not self.web_port:
            return None
        with contextlib.suppress(httpx.HTTPError, ValueError):
            response = await self._http.get(self.metrics_url)
            data = response.json() if response.status_code == 200 else None
            return data if isinstance(data, dict) else None
        return None

    def _body(
        self,
        rule: Rule,
        status: Status,
        starts_at: str,
        metrics: dict[str, Any] | None,
        **extra: str,
    ) -> dict[str, Any]:
        return notification(
            rule,
            status,
            instance=self.instance,
            starts_at=starts_at,
            ends_at=self.now(),
            description=describe(rule, metrics),
            generator_url=self.metrics_url,
            extra_labels=extra,
        )

    async def look(self) -> Delivered | None:
        """One evaluation of the error-rate rule: what was sent, or None (no change)."""
        metrics = await self.metrics()
        rate = metrics.get("error_rate") if metrics else None
        if not isinstance(rate, int | float):
            return None  # no data: the rule neither fires nor resolves
        if rate > ERROR_SHARE and self.firing_since is None:
            starts_at = self.now()
            sent = await self.sender.send(self._body(ERROR_RATE, "firing", starts_at, metrics))
            if sent.taken:
                self.firing_since = starts_at
            return sent
        if rate <= ERROR_SHARE and self.firing_since is not None:
            body = self._body(ERROR_RATE, "resolved", self.firing_since, metrics)
            sent = await self.sender.send(body)
            if sent.taken:
                self.firing_since = None
            return sent
        return None

    async def watch(self) -> None:
        """:meth:`look` every ``scrape_s`` until cancelled."""
        while True:
            sent = await self.look()
            if sent is not None:
                log.info("demo alert %s: the bot answered %s", sent.outcome, sent.status)
            await asyncio.sleep(self.scrape_s)

    async def fire_by_hand(self) -> dict[str, Any]:
        """The page's "Fire an alert": a new ``WebLatencyHigh`` group; what the bot said."""
        self.clicks += 1
        metrics = await self.metrics()
        body = self._body(LATENCY, "firing", self.now(), metrics, click=str(self.clicks))
        sent = await self.sender.send(body)
        return {"status": sent.status, "outcome": sent.outcome, "alert": LATENCY.name}

    async def close(self) -> None:
        await self._http.aclose()
        await self.sender.close()


__all__ = [
    "ALERTS_PATH",
    "ERROR_RATE",
    "LATENCY",
    "AlertSender",
    "DemoAlerts",
    "Delivered",
    "Rule",
    "describe",
    "fingerprint",
    "group_key",
    "notification",
]
