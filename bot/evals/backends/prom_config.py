"""What the ``prometheus`` eval backend's Prometheus scrapes and alerts on: the services it
pretends to run, the metrics each one serves, and the Prometheus configuration and rules.

The services are small metrics endpoints (``ServiceMetrics.render``), one per job, named
as a team's would be (``api-01:8080``, ``db-01:9187`` …: the ``instance`` label; the
scrape URL is loopback). Their numbers follow switches the faults flip:

* ``database_down``: the database's endpoint is closed by the backend (its ``up`` is 0),
  and its dependants show symptoms: ``api`` answers a third of its requests with 503,
  ``web``'s p99 latency climbs past 4 s, ``worker``'s queue backs up;
* ``backup_filling``: ``backup-01``'s ``/backup`` drops to 9 % free.

``RULES`` are the alerting rules (static: no reload is needed): ``TargetDown``,
``HighErrorRate``, ``SlowResponses``, ``QueueBacklog``, ``DiskSpaceWarning``, each firing
from its first true evaluation (no ``for``), so a fault shows within a second or two.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRAPE_INTERVAL = "500ms"  # and the rule evaluation interval: faults show within ~1 s

# job → the instance label Prometheus shows for it.
SERVICES: Mapping[str, str] = {
    "api": "api-01:8080",
    "web": "web-01:8080",
    "worker": "worker-01:8081",
    "database": "db-01:9187",
    "checkout": "checkout-01:8080",
    "backup": "backup-01:9100",
}

RULES = """\
groups:
  - name: services
    rules:
      - alert: TargetDown
        expr: up{job!~"prometheus|node"} == 0
        labels: {severity: page}
        annotations:
          summary: >-
            {{ $labels.job }} target {{ $labels.instance }} is down: Prometheus cannot scrape it
      - alert: HighErrorRate
        expr: >-
          sum by (job, instance) (rate(http_requests_total{job="api",code=~"5.."}[2s]))
          / sum by (job, instance) (rate(http_requests_total{job="api"}[2s])) > 0.05
        labels: {severity: page}
        annotations:
          summary: "api answers {{ $value | humanizePercentage }} of requests with 5xx"
      - alert: SlowResponses
        expr: http_request_duration_seconds{job="web",quantile="0.99"} > 1
        labels: {severity: warning}
        annotations:
          summary: "web p99 latency is {{ $value | printf \\"%.1f\\" }}s (objective 1s)"
      - alert: QueueBacklog
        expr: worker_queue_depth > 500
        labels: {severity: warning}
        annotations:
          summary: "worker queue {{ $labels.queue }} holds {{ $value | printf \\"%.0f\\" }} jobs"
      - alert: DiskSpaceWarning
        expr: >-
          node_filesystem_avail_bytes{job="backup"}
          / node_filesystem_size_bytes{job="backup"} < 0.15
        labels: {severity: warning}
        annotations:
          summary: >-
            {{ $labels.mountpoint }} on {{ $labels.instance }} has
            {{ $value | humanizePercentage }} free
"""


def prometheus_config(
    folder: Path, self_port: int, node_port: int, alertmanager_port: int, ports: Mapping[str, int]
) -> dict[str, Any]:
    """Prometheus's configuration (written as JSON, which is YAML): itself, node-exporter
    and every service of ``ports`` (job → loopback port), alerts sent to Alertmanager."""

    def job(name: str, port: int, instance: str | None = None) -> dict[str, Any]:
        target: dict[str, Any] = {"targets": [f"127.0.0.1:{port}"]}
        if instance is not None:
            target["labels"] = {"instance": instance}
        return {"job_name": name, "static_configs": [target]}

    return {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
        },
        "rule_files": [str(folder / "rules.yml")],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        },
        "scrape_configs": [
            job("prometheus", self_port),
            job("node", node_port),
            *(job(name, port, SERVICES[name]) for name, port in ports.items()),
        ],
    }


@dataclass
class _Counter:
    """A request counter that grows at a rate that may change (integrated per scrape)."""

    ok_rate: float
    error_rate: float
    ok: float = 0.0
    errors: float = 0.0
    at: float = 0.0

    def advance(self, now: float) -> None:
        if self.at:
            self.ok += self.ok_rate * (now - self.at)
            self.errors += self.error_rate * (now - self.at)
        self.at = now


GB = 1024**3
BACKUP_SIZE = 2000 * GB


class ServiceMetrics:
    """The metrics each service serves, following the switches (see the module
    docstring). Thread-safe: each service's endpoint serves from its own thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.database_down = False
        self.backup_filling = False
        self._api = _Counter(ok_rate=48.0, error_rate=0.05)
        self._checkout = _Counter(ok_rate=12.0, error_rate=0.0)
        self._backlog_since = 0.0

    def set_database_down(self, down: bool) -> None:
        with self._lock:
            now = time.monotonic()
            self._api.advance(now)
            self.database_down = down
            self._api.ok_rate, self._api.error_rate = (31.0, 17.0) if down else (48.0, 0.05)
            self._backlog_since = now if down else 0.0

    def set_backup_filling(self, filling: bool) -> None:
        with self._lock:
            self.backup_filling = filling

    def render(self, job: str) -> str:
        """``job``'s /metrics page (the Prometheus text format)."""
        with self._lock:
            return _RENDER[job](self, time.monotonic())

    def _render_api(self, now: float) -> str:
        self._api.advance(now)
        return _requests(self._api, "/api/orders", "503")

    def _render_checkout(self, now: float) -> str:
        self._checkout.advance(now)
        return _requests(self._checkout, "/checkout", "500")

    def _render_web(self, now: float) -> str:
        p50, p99 = (1.9, 4.7) if self.database_down else (0.041, 0.18)
        return (
            "# TYPE http_request_duration_seconds summary\n"
            f'http_request_duration_seconds{{quantile="0.5"}} {p50}\n'
            f'http_request_duration_seconds{{quantile="0.99"}} {p99}\n'
        )

    def _render_worker(self, now: float) -> str:
        depth = 4.0
        if self._backlog_since:
            depth = 820.0 + 90.0 * (now - self._backlog_since)
        return (
            f'# TYPE worker_queue_depth gauge\nworker_queue_depth{{queue="orders"}} {depth:.0f}\n'
        )

    def _render_database(self, now: float) -> str:
        return (
            "# TYPE pg_up gauge\npg_up 1\n"
            "# TYPE pg_stat_database_numbackends gauge\n"
            'pg_stat_database_numbackends{datname="shop"} 14\n'
        )

    def _render_backup(self, now: float) -> str:
        free = 0.09 if self.backup_filling else 0.62
        labels = '{device="/dev/sdb1",fstype="ext4",mountpoint="/backup"}'
        return (
            "# TYPE node_filesystem_avail_bytes gauge\n"
            f"node_filesystem_avail_bytes{labels} {free * BACKUP_SIZE:.0f}\n"
            "# TYPE node_filesystem_size_bytes gauge\n"
            f"node_filesystem_size_bytes{labels} {BACKUP_SIZE}\n"
        )


def _requests(counter: _Counter, handler: str, error_code: str) -> str:
    return (
        "# TYPE http_requests_total counter\n"
        f'http_requests_total{{code="200",handler="{handler}"}} {counter.ok:.0f}\n'
        f'http_requests_total{{code="{error_code}",handler="{handler}"}} {counter.errors:.0f}\n'
    )


_RENDER: Mapping[str, Callable[[ServiceMetrics, float], str]] = {
    "api": ServiceMetrics._render_api,
    "web": ServiceMetrics._render_web,
    "worker": ServiceMetrics._render_worker,
    "database": ServiceMetrics._render_database,
    "checkout": ServiceMetrics._render_checkout,
    "backup": ServiceMetrics._render_backup,
}
