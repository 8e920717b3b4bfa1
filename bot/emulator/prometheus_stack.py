"""Real Prometheus, node-exporter and Alertmanager (the Debian packages) as child processes.

Each runs on a free loopback port with its data under a directory of the caller's
choosing, its output in a log file there (its tail is in any start-up error):

* ``PrometheusStack``: node-exporter (loadavg, cpu, meminfo collectors) and Prometheus
  scraping it, itself and a closed port (job ``dead``) every second, with the rules of
  ``RULES``: ``AlwaysFiring`` (``vector(1) > 0``, firing from the first evaluation) and
  ``AlwaysPending`` (the same with ``for: 1h``). ``start`` returns once every target has
  been scraped and the alert fires, so callers never wait on the clock.
* ``AlertmanagerServer``: clustering off; by default one receiver that sends nothing
  (``bot.emulator.alert_feed`` gives it a webhook receiver that is a bot).

``stop`` sends SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``, and waits: nothing is left
running. Used by the prometheus and alertmanager packs' tests
(``tests/tools/packs/backends.py`` adds their fixtures), ``opsloop check``'s test and
``benchmarks/pack_prometheus.py``.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Self

import httpx

from bot.emulator.redis_server import free_port

START_TIMEOUT_S = 20.0
DATA_TIMEOUT_S = 20.0  # first scrape of every target and first rule evaluation
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05
BIND_ATTEMPTS = 3  # a free port can be taken between choosing it and the bind
LOG_TAIL_CHARS = 2000

NODE_EXPORTER_COLLECTORS = ("loadavg", "cpu", "meminfo")

RULES = """\
groups:
  - name: opsloop-tests
    interval: 1s
    rules:
      - alert: AlwaysFiring
        expr: vector(1) > 0
        labels: {severity: page, team: ops}
        annotations: {summary: "Always firing, for the tests"}
      - alert: AlwaysPending
        expr: vector(1) > 0
        for: 1h
        labels: {severity: ticket}
"""

ALERTMANAGER_CONFIG = """\
route:
  receiver: blackhole
  group_wait: 1h
receivers:
  - name: blackhole
"""


class BackendStartError(RuntimeError):
    pass


def refused_port() -> socket.socket:
    """A loopback socket bound but never listening: connecting to its port is refused for
    as long as it stays open, and no other process (another xdist worker's server) can
    take the port meanwhile, as it could a port merely found free."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    return held


def binary(name: str) -> str:
    path = shutil.which(name, path="/usr/bin:/usr/sbin:/usr/local/bin")
    if path is None:
        raise BackendStartError(f"{name} is not installed (scripts/system-deps installs it)")
    return path


class Process:
    """One server: ``start(argv)`` then ``wait_ready``; ``stop`` always reaps it."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name = name
        self.folder = folder
        self.log_path = folder / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, argv: list[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def exited(self) -> bool:
        return self._proc is None or self._proc.poll() is not None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def wait_ready(self, url: str, deadline: float) -> None:
        """Poll ``url`` until it answers 200; ``BackendStartError`` (with the log) if the
        process exits or the deadline passes."""
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.exited:
                    raise BackendStartError(f"{self.name} exited at start:\n{self.log_tail()}")
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(POLL_S)
        raise BackendStartError(f"{self.name} not ready at {url}:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None


def start_on_free_port(
    process: Process, argv: Callable[[int], list[str]], ready: Callable[[int], str]
) -> int:
    """Start ``process`` on a free port, retrying when the port was taken meanwhile; the
    port. ``argv`` and ``ready`` (its readiness URL) are given the port."""
    for attempt in range(BIND_ATTEMPTS):
        port = free_port()
        process.start(argv(port))
        try:
            process.wait_ready(ready(port), time.monotonic() + START_TIMEOUT_S)
            return port
        except BackendStartError:
            in_use = "address already in use" in process.log_tail()
            process.stop()
            if not in_use or attempt == BIND_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


class PrometheusStack:
    """node-exporter plus a Prometheus scraping it; see the module docstring."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.node_exporter = Process("node-exporter", folder)
        self.prometheus = Process("prometheus", folder)
        self.node_port = 0
        self.port = 0
        self._dead = refused_port()  # nothing listens there: the ``dead`` job is down
        self.dead_port = int(self._dead.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def node_exporter_url(self) -> str:
        return f"http://127.0.0.1:{self.node_port}"

    def start(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        collectors = [f"--collector.{name}" for name in NODE_EXPORTER_COLLECTORS]
        self.node_port = start_on_free_port(
            self.node_exporter,
            lambda port: [
                binary("prometheus-node-exporter"),
                f"--web.listen-address=127.0.0.1:{port}",
                "--collector.disable-defaults",
                *collectors,
                "--log.level=warn",
            ],
            lambda port: f"http://127.0.0.1:{port}/metrics",
        )
        (self.folder / "rules.yml").write_text(RULES)

        def argv(port: int) -> list[str]:
            config = self.folder / "prometheus.yml"
            config.write_text(json.dumps(self._config(port), indent=2))  # JSON is YAML
            return [
                binary("prometheus"),
                f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--storage.tsdb.path={self.folder / 'tsdb'}",
                "--log.level=warn",
            ]

        self.port = start_on_free_port(
            self.prometheus, argv, lambda port: f"http://127.0.0.1:{port}/-/ready"
        )
        self._wait_for_data()

    def _config(self, port: int) -> dict[str, Any]:
        def job(name: str, target_port: int) -> dict[str, Any]:
            return {"job_name": name, "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}

        return {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(self.folder / "rules.yml")],
            "scrape_configs": [
                job("node", self.node_port),
                job("prometheus", port),
                job("dead", self.dead_port),
            ],
        }

    def _wait_for_data(self) -> None:
        """Until every target has a health and ``AlwaysFiring`` fires."""
        deadline = time.monotonic() + DATA_TIMEOUT_S
        with httpx.Client(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                targets = client.get("/api/v1/targets").json()["data"]["activeTargets"]
                alerts = client.get("/api/v1/alerts").json()["data"]["alerts"]
                scraped = len(targets) == 3 and all(t["health"] != "unknown" for t in targets)
                firing = any(a["state"] == "firing" for a in alerts)
                load = client.get("/api/v1/query", params={"query": "node_load1"}).json()
                if scraped and firing and load["data"]["result"]:
                    return
                time.sleep(POLL_S)
        raise BackendStartError(f"prometheus has no data after {DATA_TIMEOUT_S:g}s")

    def stop(self) -> None:
        self.prometheus.stop()
        self.node_exporter.stop()
        self._dead.close()


class AlertmanagerServer:
    """An Alertmanager with clustering off; see the module docstring. ``config``: its
    configuration (YAML), by default one receiver that sends nothing."""

    def __init__(self, folder: Path, config: str = ALERTMANAGER_CONFIG) -> None:
        self.folder = folder
        self.config = config
        self.process = Process("alertmanager", folder)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        config = self.folder / "alertmanager.yml"
        self.folder.mkdir(parents=True, exist_ok=True)
        config.write_text(self.config)
        self.port = start_on_free_port(
            self.process,
            lambda port: [
                binary("prometheus-alertmanager"),
                f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                f"--storage.path={self.folder / 'data'}",
                "--log.level=warn",
            ],
            lambda port: f"http://127.0.0.1:{port}/-/ready",
        )
        return self

    def post_alerts(self, *alerts: dict[str, Any]) -> None:
        """POST alerts as Prometheus would (``[{labels, annotations}]``, API v2)."""
        with httpx.Client(base_url=self.url, timeout=5.0) as client:
            client.post("/api/v2/alerts", json=list(alerts)).raise_for_status()

    def stop(self) -> None:
        self.process.stop()
