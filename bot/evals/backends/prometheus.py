"""The ``prometheus`` eval backend: a real Prometheus, node-exporter and Alertmanager (the
Debian packages, started as ``bot.emulator.prometheus_stack`` starts them) on loopback,
Prometheus scraping six services' metrics endpoints (``prom_config``: api, web, worker,
database, checkout, backup) and sending its alerts to the Alertmanager.

The bot reaches it through the ``prometheus`` and ``alertmanager`` packs. Faults:

* ``target_down`` (``job``, default ``checkout``): the job's endpoint is closed (its port
  refuses connections), ``up`` is 0 and ``TargetDown`` fires in Prometheus and
  Alertmanager. Facts: ``job``, ``instance``, ``alert``.
* ``alert_storm``: the database's endpoint is closed (``TargetDown{job="database"}``, the
  root cause) and its dependants' symptoms fire: ``HighErrorRate`` (api),
  ``SlowResponses`` (web), ``QueueBacklog`` (worker). Facts: ``root_alert``,
  ``root_job``, ``root_instance``, ``symptoms``.
* ``silenced_page`` (``job``, default ``checkout``): the job is down as in
  ``target_down``, and a 30-day silence someone left behind (``createdBy``
  ``dana@shop.example``, comment ``CHG-881 …``) hides its ``TargetDown``. Facts: ``job``,
  ``instance``, ``silence_id``, ``created_by``.
* ``backup_disk``: ``/backup`` on ``backup-01`` drops to 9 % free and
  ``DiskSpaceWarning`` fires. Facts: ``alert``, ``instance``, ``mountpoint``.

Each fault returns once its alerts are firing in Prometheus *and* held by Alertmanager,
and heals by putting the service back and waiting until every target is up and neither
server holds an alert (each ≈0.5 s, the storm's heal ≈1.4 s). ``reset`` also expires
every silence (an approved ``alertmanager_create_silence``). ``start`` returns once the
processes answer (≈0.4 s); Prometheus sends its first scrapes about 5 s after it starts
(its service discovery's fixed throttle), which the first fault (or ``reset``) awaits, so
a runner's other work overlaps them (start to first scrapes measured at ≈6.3 s on 2 cores).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx

from bot.emulator.prometheus_stack import (
    AlertmanagerServer,
    BackendStartError,
    Process,
    binary,
    start_on_free_port,
)
from bot.evals.backends.base import BackendError, Facts, Reach
from bot.evals.backends.prom_config import (
    RULES,
    SERVICES,
    ServiceMetrics,
    prometheus_config,
)

START_TIMEOUT_S = 20.0  # a process answering its readiness URL
SETTLE_TIMEOUT_S = 30.0  # the first scrapes (≈5 s after start) or an alert firing/resolving
POLL_S = 0.1
BIND_ATTEMPTS = 3
SILENCE_AUTHOR = "dana@shop.example"
SILENCE_COMMENT = "CHG-881 checkout maintenance window (back on Friday)"
SILENCE_DAYS = 30
STORM_SYMPTOMS = ("HighErrorRate", "SlowResponses", "QueueBacklog")


class Endpoint:
    """One service's ``/metrics`` on a fixed loopback port, served from a thread.
    ``close`` makes the port refuse connections (a bound socket that never listens holds
    it, so nothing else takes it meanwhile); ``open`` serves on it again."""

    def __init__(self, render: Callable[[], str]) -> None:
        self._render = render
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._held: socket.socket | None = None
        self.port = 0

    @property
    def serving(self) -> bool:
        return self._server is not None

    def open(self) -> None:
        if self._server is not None:
            return
        if self._held is not None:
            self._held.close()
            self._held = None
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self._render))
        server.daemon_threads = True
        self.port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread

    def close(self, *, hold: bool = True) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if hold and self._held is None and self.port:
            held = socket.socket()
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held.bind(("127.0.0.1", self.port))
            self._held = held
        elif not hold and self._held is not None:
            self._held.close()
            self._held = None


def _handler(render: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            if self.path.partition("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Metrics


class PrometheusBackend:
    """See the module docstring."""

    kind: ClassVar[str] = "prometheus"
    faults: ClassVar[tuple[str, ...]] = (
        "target_down",
        "alert_storm",
        "silenced_page",
        "backup_disk",
    )

    def __init__(self) -> None:
        self.metrics = ServiceMetrics()
        self.endpoints = {job: Endpoint(self._renderer(job)) for job in SERVICES}
        self.folder = Path()
        self.node_exporter: Process | None = None
        self.prometheus: Process | None = None
        self.alertmanager: AlertmanagerServer | None = None
        self.prometheus_url = ""
        self.alertmanager_url = ""
        self._client: httpx.AsyncClient | None = None
        self._first_scrapes: asyncio.Task[None] | None = None

    def _renderer(self, job: str) -> Callable[[], str]:
        return lambda: self.metrics.render(job)

    # -- life cycle -------------------------------------------------------------------

    async def start(self, folder: Path) -> Reach:
        self.folder = folder
        try:
            await asyncio.to_thread(self._start_processes)
        except BackendStartError as exc:
            await self.stop()
            raise BackendError(f"prometheus backend: {exc}") from None
        except BaseException:
            await self.stop()
            raise
        self._client = httpx.AsyncClient(timeout=2.0)
        # The first scrapes come ~5 s after Prometheus starts: awaited by the first fault
        # (or reset), so the runner's other work overlaps them.
        self._first_scrapes = asyncio.create_task(self._until("the first scrapes", self._started))
        return Reach(
            packs=("prometheus", "alertmanager"),
            pack_config={
                "prometheus_url": self.prometheus_url,
                "alertmanager_url": self.alertmanager_url,
            },
        )

    def _start_processes(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for endpoint in self.endpoints.values():
            endpoint.open()
        self.alertmanager = AlertmanagerServer(self.folder / "alertmanager").start()
        self.alertmanager_url = self.alertmanager.url
        self.node_exporter = Process("node-exporter", self.folder)
        node_port = start_on_free_port(
            self.node_exporter,
            lambda port: [
                binary("prometheus-node-exporter"),
                f"--web.listen-address=127.0.0.1:{port}",
                "--collector.disable-defaults",
                "--collector.loadavg",
                "--collector.cpu",
                "--collector.meminfo",
                "--log.level=warn",
            ],
            lambda port: f"http://127.0.0.1:{port}/metrics",
        )
        (self.folder / "rules.yml").write_text(RULES)
        ports = {job: endpoint.port for job, endpoint in self.endpoints.items()}
        am_port = self.alertmanager.port

        def argv(port: int) -> list[str]:
            config = self.folder / "prometheus.yml"
            body = prometheus_config(self.folder, port, node_port, am_port, ports)
            config.write_text(json.dumps(body, indent=2))
            return [
                binary("prometheus"),
                f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--storage.tsdb.path={self.folder / 'tsdb'}",
                "--log.level=warn",
            ]

        self.prometheus = Process("prometheus", self.folder)
        port = start_on_free_port(
            self.prometheus, argv, lambda port: f"http://127.0.0.1:{port}/-/ready"
        )
        self.prometheus_url = f"http://127.0.0.1:{port}"

    async def _scraped(self) -> None:
        """Once the first scrapes are in (``BackendError`` if they never come)."""
        if self._first_scrapes is None:
            raise BackendError("prometheus backend: not started")
        await asyncio.shield(self._first_scrapes)

    async def stop(self) -> None:
        if self._first_scrapes is not None:
            self._first_scrapes.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._first_scrapes
            self._first_scrapes = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await asyncio.to_thread(self._stop_processes)

    def _stop_processes(self) -> None:
        for process in (self.prometheus, self.node_exporter):
            if process is not None:
                process.stop()
        if self.alertmanager is not None:
            self.alertmanager.stop()
        for endpoint in self.endpoints.values():
            endpoint.close(hold=False)

    async def reset(self) -> None:
        """Every silence expired, every service healthy, no alert anywhere."""
        await self._scraped()
        for silence in await self._am("/api/v2/silences"):
            if silence.get("status", {}).get("state") in ("active", "pending"):
                await self._call(
                    "DELETE", f"{self.alertmanager_url}/api/v2/silence/{silence['id']}"
                )
        await self._heal()

    async def _heal(self) -> None:
        self.metrics.set_database_down(False)
        self.metrics.set_backup_filling(False)
        for endpoint in self.endpoints.values():
            if not endpoint.serving:
                await asyncio.to_thread(endpoint.open)
        await self._until("the healthy baseline", self._healthy)

    # -- faults -----------------------------------------------------------------------

    def fault(
        self, name: str, params: Mapping[str, Any]
    ) -> contextlib.AbstractAsyncContextManager[Facts]:
        faults: dict[
            str, Callable[[Mapping[str, Any]], contextlib.AbstractAsyncContextManager[Facts]]
        ]
        faults = {
            "target_down": self._target_down,
            "alert_storm": self._alert_storm,
            "silenced_page": self._silenced_page,
            "backup_disk": self._backup_disk,
        }
        if name not in faults:
            raise BackendError(
                f"prometheus backend has no fault {name!r} (known: {', '.join(faults)})"
            )
        return self._after_first_scrapes(faults[name](params))

    @contextlib.asynccontextmanager
    async def _after_first_scrapes(
        self, fault: contextlib.AbstractAsyncContextManager[Facts]
    ) -> AsyncIterator[Facts]:
        await self._scraped()
        async with fault as facts:
            yield facts

    def _job(self, params: Mapping[str, Any]) -> str:
        job = str(params.get("job", "checkout"))
        if job not in self.endpoints:
            raise BackendError(f"target_down: no job {job!r} (known: {', '.join(SERVICES)})")
        return job

    @contextlib.asynccontextmanager
    async def _target_down(self, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        job = self._job(params)
        try:
            await asyncio.to_thread(self.endpoints[job].close)
            await self._until(f"TargetDown of {job}", self._firing({"TargetDown": job}))
            await self._until(f"a refused scrape of {job}", self._refused(job))
            yield {"job": job, "instance": SERVICES[job], "alert": "TargetDown"}
        finally:
            await self._heal()

    @contextlib.asynccontextmanager
    async def _alert_storm(self, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        wanted = {"TargetDown": "database", **dict.fromkeys(STORM_SYMPTOMS, "")}
        try:
            self.metrics.set_database_down(True)
            await asyncio.to_thread(self.endpoints["database"].close)
            await self._until("the alert storm", self._firing(wanted))
            await self._until("a refused scrape of database", self._refused("database"))
            yield {
                "root_alert": "TargetDown",
                "root_job": "database",
                "root_instance": SERVICES["database"],
                "symptoms": ",".join(STORM_SYMPTOMS),
            }
        finally:
            await self._heal()

    @contextlib.asynccontextmanager
    async def _silenced_page(self, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        job = self._job(params)
        silence_id = ""
        try:
            now = datetime.now(UTC)
            answer = await self._call(
                "POST",
                f"{self.alertmanager_url}/api/v2/silences",
                json={
                    "matchers": [{"name": "job", "value": job, "isRegex": False, "isEqual": True}],
                    "startsAt": now.isoformat(),
                    "endsAt": (now + timedelta(days=SILENCE_DAYS)).isoformat(),
                    "createdBy": SILENCE_AUTHOR,
                    "comment": SILENCE_COMMENT,
                },
            )
            silence_id = str(answer["silenceID"])
            await asyncio.to_thread(self.endpoints[job].close)
            await self._until(f"the silenced TargetDown of {job}", self._silenced(job, silence_id))
            await self._until(f"a refused scrape of {job}", self._refused(job))
            yield {
                "job": job,
                "instance": SERVICES[job],
                "silence_id": silence_id,
                "created_by": SILENCE_AUTHOR,
            }
        finally:
            if silence_id:
                await self._call("DELETE", f"{self.alertmanager_url}/api/v2/silence/{silence_id}")
            await self._heal()

    @contextlib.asynccontextmanager
    async def _backup_disk(self, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        try:
            self.metrics.set_backup_filling(True)
            await self._until("DiskSpaceWarning", self._firing({"DiskSpaceWarning": "backup"}))
            yield {
                "alert": "DiskSpaceWarning",
                "instance": SERVICES["backup"],
                "mountpoint": "/backup",
            }
        finally:
            await self._heal()

    # -- what the servers say ---------------------------------------------------------

    async def _call(self, method: str, url: str, **kwargs: Any) -> Any:
        assert self._client is not None, "not started"
        response = await self._client.request(method, url, **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None

    async def _prom(self, path: str) -> Any:
        return (await self._call("GET", f"{self.prometheus_url}{path}"))["data"]

    async def _am(self, path: str) -> list[dict[str, Any]]:
        answer = await self._call("GET", f"{self.alertmanager_url}{path}")
        return [item for item in answer if isinstance(item, dict)]

    async def _until(self, what: str, ready: Callable[[], Awaitable[str | None]]) -> None:
        """Poll ``ready`` (``None`` when met, else what is missing) until it is met;
        ``BackendError`` naming what was missing after ``SETTLE_TIMEOUT_S``."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        missing: str | None = "nothing checked yet"
        while time.monotonic() < deadline:
            try:
                missing = await ready()
            except httpx.HTTPError as exc:
                missing = f"{type(exc).__name__}: {exc}"
            if missing is None:
                return
            await asyncio.sleep(POLL_S)
        raise BackendError(f"prometheus backend: no {what} after {SETTLE_TIMEOUT_S:g}s: {missing}")

    async def _started(self) -> str | None:
        managers = (await self._prom("/api/v1/alertmanagers"))["activeAlertmanagers"]
        if not managers:
            return "prometheus has not found the alertmanager yet"
        return await self._healthy()

    async def _healthy(self) -> str | None:
        targets = (await self._prom("/api/v1/targets"))["activeTargets"]
        unhealthy = [t["labels"].get("job", "?") for t in targets if t["health"] != "up"]
        if len(targets) != len(SERVICES) + 2 or unhealthy:
            return f"targets not up: {unhealthy or 'not all discovered'}"
        alerts = (await self._prom("/api/v1/alerts"))["alerts"]
        if alerts:
            return f"prometheus alerts: {[a['labels']['alertname'] for a in alerts]}"
        held = await self._am("/api/v2/alerts")
        if held:
            return f"alertmanager alerts: {[a['labels']['alertname'] for a in held]}"
        return None

    def _refused(self, job: str) -> Callable[[], Awaitable[str | None]]:
        """The job's last scrape was refused: the steady state of a closed port (the
        scrape in flight as it closed may end "connection reset by peer" instead, and
        the evidence the cases read is the refusal)."""

        async def ready() -> str | None:
            targets = (await self._prom("/api/v1/targets"))["activeTargets"]
            errors = [t.get("lastError", "") for t in targets if t["labels"].get("job") == job]
            if any("connection refused" in e for e in errors):
                return None
            return f"the last scrape of {job} said {errors!r}"

        return ready

    def _firing(self, wanted: Mapping[str, str]) -> Callable[[], Awaitable[str | None]]:
        """Every alert name of ``wanted`` (with that job, when not empty) firing in
        Prometheus and active in Alertmanager."""

        def met(alerts: list[dict[str, Any]]) -> set[str]:
            return {
                a["labels"]["alertname"]
                for a in alerts
                if a["labels"].get("alertname") in wanted
                and wanted[a["labels"]["alertname"]] in ("", a["labels"].get("job"))
            }

        async def ready() -> str | None:
            alerts = (await self._prom("/api/v1/alerts"))["alerts"]
            firing = met([a for a in alerts if a["state"] == "firing"])
            if missing := set(wanted) - firing:
                return f"not firing in prometheus: {sorted(missing)}"
            held = await self._am("/api/v2/alerts?silenced=false&inhibited=false")
            if missing := set(wanted) - met(held):
                return f"not in alertmanager: {sorted(missing)}"
            return None

        return ready

    def _silenced(self, job: str, silence_id: str) -> Callable[[], Awaitable[str | None]]:
        async def ready() -> str | None:
            for alert in await self._am("/api/v2/alerts"):
                labels = alert["labels"]
                if labels.get("alertname") == "TargetDown" and labels.get("job") == job:
                    if silence_id in alert.get("status", {}).get("silencedBy", []):
                        return None
            return f"no TargetDown of {job} silenced by {silence_id} in alertmanager"

        return ready
