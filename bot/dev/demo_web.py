"""The demo service "web" itself: the process ``python -m bot.dev.demo_service serve`` runs.

It answers ``GET /`` (a line of text), ``GET /health`` and ``GET /metrics`` (JSON) on
127.0.0.1. It is healthy for ``healthy_for`` seconds, then degraded until it stops: ``/``
and ``/health`` take 1.5–2.5 s and about 30 % of them answer 500, and a background thread
burns about 60 % of one core in short slices. A built-in client sends it a few requests a
second, so its metrics and log have traffic to show. Its metrics (:class:`WebState`)
describe the state it is in: the requests that finished since it began (start or
degradation), at most the last minute (``window_s``); with none, the rates are null, not
0. It writes the files of its state folder (:data:`PIDFILE`, :data:`ARGSFILE`,
:data:`LOGFILE`; :data:`ERRFILE` is its stderr, opened by whoever starts it) and nothing
anywhere else.

Starting, stopping and restarting it, and its command line, are ``bot.dev.demo_service``'s.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
PIDFILE, ARGSFILE, LOGFILE, ERRFILE = "web.pid", "web.json", "web.log", "web.err"

DEGRADED_LATENCY_S = (1.5, 2.5)
DEGRADED_ERROR_SHARE = 0.3
BURN_PERIOD_S = 0.010  # the burn runs in 10 ms periods, busy for ``cpu_share`` of each
DEFAULT_CPU_SHARE = 0.6  # ~60 % of one core while degraded
TRAFFIC_INTERVAL_S = 0.25  # the built-in client: 4 requests/s
TRAFFIC_MAX_IN_FLIGHT = 8
WINDOW_S = 60.0  # metrics are over the last minute
SUMMARY_EVERY_S = 10.0
SLOW_MS = 1000.0
LOG_MAX_BYTES = 1 << 20

log = logging.getLogger("web")


class WebState:
    """What the service knows about itself: its age, its requests of the last minute."""

    def __init__(
        self, *, port: int, healthy_for: float, cpu_share: float = DEFAULT_CPU_SHARE
    ) -> None:
        self.port = port
        self.healthy_for = healthy_for
        self.cpu_share = min(max(cpu_share, 0.0), 0.9)
        self.started = time.monotonic()
        self.since = self.started  # when the current state began: metrics describe it
        self.requests = 0
        self.degraded = False  # set once, by ``_degrade``, after the log line saying so
        self._samples: deque[tuple[float, float, bool]] = deque(maxlen=100_000)
        self._cpu: deque[tuple[float, float]] = deque(maxlen=6)  # (wall, cpu) each second
        self._lock = threading.Lock()
        self._rng = random.Random()

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started

    def degrade(self) -> None:
        """From now on: slow, failing requests and the CPU burn."""
        with self._lock:
            self.since = time.monotonic()
        self.degraded = True

    def fault(self) -> tuple[float, bool]:
        """(seconds to stall, answer 500) for one request to ``/`` or ``/health``."""
        if not self.degraded:
            return 0.0, False
        with self._lock:
            return self._rng.uniform(*DEGRADED_LATENCY_S), self._rng.random() < DEGRADED_ERROR_SHARE

    def record(self, latency_ms: float, ok: bool) -> None:
        with self._lock:
            self.requests += 1
            self._samples.append((time.monotonic(), latency_ms, ok))

    def sample_cpu(self) -> None:
        with self._lock:
            self._cpu.append((time.monotonic(), time.process_time()))

    def window(self) -> tuple[float, list[tuple[float, float, bool]]]:
        """(seconds, the requests finished in them): since the state began, at most a minute."""
        now = time.monotonic()
        with self._lock:
            while self._samples and self._samples[0][0] < now - WINDOW_S:
                self._samples.popleft()
            since = max(self.since, now - WINDOW_S)
            return now - since, [s for s in self._samples if s[0] >= since]

    def cpu_percent(self) -> float:
        with self._lock:
            if len(self._cpu) < 2:
                return 0.0
            (wall0, cpu0), (wall1, cpu1) = self._cpu[0], self._cpu[-1]
        return round(100 * (cpu1 - cpu0) / max(wall1 - wall0, 1e-6), 1)

    def metrics(self) -> dict[str, Any]:
        window_s, samples = self.window()
        latencies = sorted(s[1] for s in samples)
        errors = sum(1 for s in samples if not s[2])
        some = bool(samples)
        return {
            "service": "web",
            "pid": os.getpid(),
            "port": self.port,
            "state": "degraded" if self.degraded else "healthy",
            "uptime_s": round(self.uptime, 1),
            "window_s": round(window_s, 1),
            "requests": self.requests,
            "requests_last_min": len(samples),
            "errors_last_min": errors,
            "error_rate": round(errors / len(samples), 3) if some else None,
            "p50_ms": round(_percentile(latencies, 0.50), 1) if some else None,
            "p95_ms": round(_percentile(latencies, 0.95), 1) if some else None,
            "cpu_burn": "on" if self.degraded else "off",
            "cpu_percent": self.cpu_percent(),
        }


def _ms(value: Any) -> str:
    if not isinstance(value, int | float):
        return "—"
    return "<1 ms" if value < 1 else f"{value:.0f} ms"


def summary_line(m: dict[str, Any]) -> str:
    """The metrics in one line, as people read them (the ``metrics`` command's first)."""
    window = f"the last {max(1.0, float(m.get('window_s') or 0)):.0f} s"
    head = f"web is {m.get('state', 'unknown')}: "
    rate = m.get("error_rate")
    if not m.get("requests_last_min") or not isinstance(rate, int | float):
        body = f"no request finished in {window}"
    else:
        body = (
            f"{rate * 100:.0f}% of {m['requests_last_min']} requests failed in {window}, "
            f"p50 {_ms(m.get('p50_ms'))}, p95 {_ms(m.get('p95_ms'))}"
        )
    cpu, up = float(m.get("cpu_percent") or 0), float(m.get("uptime_s") or 0)
    return (
        f"{head}{body}; CPU {cpu:.0f}% (burn {m.get('cpu_burn', '?')}), "
        f"pid {m.get('pid', '?')}, up {up:.0f} s"
    )


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


class WebServer(ThreadingHTTPServer):
    daemon_threads = True  # a stalled request does not hold up the exit

    def __init__(self, port: int, healthy_for: float, cpu_share: float = DEFAULT_CPU_SHARE) -> None:
        super().__init__((HOST, port), Handler)
        self.web = WebState(
            port=int(self.server_address[1]), healthy_for=healthy_for, cpu_share=cpu_share
        )


class Handler(BaseHTTPRequestHandler):
    server: WebServer
    server_version = "web/1.0"

    def do_GET(self) -> None:
        web = self.server.web
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, json.dumps(web.metrics()), "application/json")
            return
        if path not in ("/", "/health"):
            self._send(404, "not found\n")
            return
        started = time.perf_counter()
        stall, fail = web.fault()
        if stall:
            time.sleep(stall)
        if fail:
            body = "error: reindex job holds every worker (timed out waiting for a worker)\n"
        else:
            body = "ok\n" if path == "/health" else "web: hello from the opsloop demo service\n"
        elapsed_ms = (time.perf_counter() - started) * 1000
        web.record(elapsed_ms, not fail)
        if fail:
            log.error("GET %s 500 in %.0f ms: timed out waiting for a worker", path, elapsed_ms)
        elif elapsed_ms > SLOW_MS:
            log.warning("GET %s 200 in %.0f ms (slow)", path, elapsed_ms)
        self._send(500 if fail else 200, body)

    def _send(self, status: int, body: str, content_type: str = "text/plain") -> None:
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header("content-type", f"{content_type}; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up waiting

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests worth a line are logged by do_GET


def _burn(web: WebState, stop: threading.Event) -> None:
    """While degraded, keep one core ``cpu_share`` busy (about 60 %), in slices (never more)."""
    busy = BURN_PERIOD_S * web.cpu_share
    while not stop.is_set():
        if not web.degraded or busy <= 0:
            stop.wait(0.2)
            continue
        until = time.perf_counter() + busy
        while time.perf_counter() < until:
            pass
        stop.wait(BURN_PERIOD_S - busy)


def _traffic(web: WebState, stop: threading.Event) -> None:
    """The built-in client: a few requests a second to ``/``, a bounded number in flight."""
    slots = threading.BoundedSemaphore(TRAFFIC_MAX_IN_FLIGHT)
    url = f"http://{HOST}:{web.port}/"

    def one() -> None:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                response.read()
        except (OSError, urllib.error.URLError):
            pass  # a 500 or a timeout: the server has recorded it already
        finally:
            slots.release()

    while not stop.wait(TRAFFIC_INTERVAL_S):
        if slots.acquire(blocking=False):
            threading.Thread(target=one, name="traffic", daemon=True).start()


def _degrade(web: WebState, stop: threading.Event) -> None:
    """At ``healthy_for`` seconds of uptime: say so in the log, then degrade."""
    if stop.wait(max(0.0, web.healthy_for - web.uptime)):
        return
    lo, hi = DEGRADED_LATENCY_S
    log.warning(
        "background job 'reindex' is stuck in a busy loop after %.0f s of uptime "
        "(demo fault): requests now take %.1f-%.1f s, about %d%% fail, CPU burn on",
        web.uptime,
        lo,
        hi,
        DEGRADED_ERROR_SHARE * 100,
    )
    web.degrade()


def _ticker(web: WebState, stop: threading.Event) -> None:
    """CPU samples every second, a summary of the last minute every 10 s."""
    last_summary = time.monotonic()
    while not stop.wait(1.0):
        web.sample_cpu()
        if time.monotonic() - last_summary >= SUMMARY_EVERY_S:
            last_summary = time.monotonic()
            m = web.metrics()
            log.info("%s", summary_line(m))


def serve(
    *, port: int, state_dir: Path, healthy_for: float, cpu_share: float = DEFAULT_CPU_SHARE
) -> int:
    """Run the service until SIGTERM/SIGINT; 1 if the port cannot be bound."""
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(
        state_dir / LOGFILE, maxBytes=LOG_MAX_BYTES, backupCount=1, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        server = WebServer(port, healthy_for, cpu_share)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", HOST, port, exc.strerror)
        print(f"web: cannot listen on {HOST}:{port}: {exc.strerror}", file=sys.stderr)
        return 1
    web = server.web
    args = {"port": web.port, "healthy_for": healthy_for, "cpu_share": web.cpu_share}
    _write_atomic(state_dir / ARGSFILE, json.dumps(args))
    _write_atomic(state_dir / PIDFILE, f"{os.getpid()}\n")

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s received, stopping", signal.Signals(signum).name)
        # shutdown() waits for serve_forever, which runs in this (the main) thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop = threading.Event()
    for target in (_degrade, _burn, _traffic, _ticker):
        threading.Thread(target=target, args=(web, stop), name=target.__name__, daemon=True).start()
    log.info("started: pid %d on %s:%d, healthy for %g s", os.getpid(), HOST, web.port, healthy_for)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stop.set()
        server.server_close()
        if read_pid(state_dir) == os.getpid():
            (state_dir / PIDFILE).unlink(missing_ok=True)
        log.info("stopped: pid %d", os.getpid())
    return 0


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_pid(state_dir: Path) -> int | None:
    """The pid the pidfile of ``state_dir`` names (None: none, or not a pid)."""
    try:
        text = (state_dir / PIDFILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None
