"""The ``http`` backend: two small real HTTP services on 127.0.0.1, ``checkout`` and
``inventory`` (checkout calls inventory on every request), in one child process of ours.

``python -m bot.evals.backends.http serve DIR`` is that process: both services read
their configuration from ``DIR/conf/<service>.json`` on every request (a deploy is a
new file; the service logs that it reloaded it), log to ``DIR/logs/<service>.log`` (which
starts with the line saying where the service serves, as a real start would) and
write the ports they listen on to ``DIR/ports.json``. It ends when its parent goes.

- ``checkout``: ``GET /`` and ``GET /health`` call inventory's ``/stock`` at the
  configured ``upstream_url`` and answer JSON naming the dependency, its status and its
  latency (``"degraded"`` past a second). Without ``upstream_url`` it answers 500 and
  logs why.
- ``inventory``: ``GET /stock`` and ``GET /health`` answer after its database query
  time (``_query_s``: the backend's knob, which the service's log does not name),
  logging a slow query past half a second.

The packs: ``http`` (``OPSLOOP_HTTP_ALLOW=127.0.0.1``) and ``host`` for the services'
logs (``OPSLOOP_LOG_DIRS``). The faults:

- ``bad_config_5xx``: release 2024.06.3 of checkout's config renames ``upstream_url`` to
  ``upstream_uri``; checkout answers every request 500 and its log says
  ``config: upstream_url missing``. Three requests are sent so the log shows them.
- ``slow_dependency`` (``delay_s``, default 2.0): inventory's database query takes
  ``delay_s``: inventory answers in about that, and so does checkout (degraded).

Facts (every fault): ``checkout_url`` and ``inventory_url`` (their ``/health``),
``checkout_port``, ``inventory_port``, ``log_dir``; ``bad_config_5xx`` adds ``log``
(``checkout.log``) and ``release``; ``slow_dependency`` adds ``log`` (``inventory.log``)
and ``delay_ms``. Healing deploys the healthy configs again; ``reset`` also trims the
logs and starts the process again if it died.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

from bot.evals.backends.base import BackendError, Facts, Reach

MODULE = "bot.evals.backends.http"
SERVICES = ("checkout", "inventory")
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
POLL_S = 0.02
HEALTHY_RELEASE = "2024.06.2"
BAD_RELEASE = "2024.06.3"
UPSTREAM_TIMEOUT_S = 8.0
SLOW_S = 1.0  # checkout calls itself degraded past this
SLOW_QUERY_S = 0.5


def healthy_configs(inventory_port: int) -> dict[str, dict[str, Any]]:
    return {
        "checkout": {
            "release": HEALTHY_RELEASE,
            "upstream_url": f"http://127.0.0.1:{inventory_port}/stock",
            "upstream_timeout_s": UPSTREAM_TIMEOUT_S,
        },
        "inventory": {"release": HEALTHY_RELEASE, "db_pool": 10, "_query_s": 0.005},
    }


class HttpBackend:
    """checkout and inventory on loopback; see the module docstring."""

    kind: ClassVar[str] = "http"
    faults: ClassVar[tuple[str, ...]] = ("bad_config_5xx", "slow_dependency")

    def __init__(self) -> None:
        self.folder = Path()
        self.ports: dict[str, int] = {}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    def url(self, service: str, path: str = "/health") -> str:
        return f"http://127.0.0.1:{self.ports[service]}{path}"

    async def start(self, folder: Path) -> Reach:
        self.folder = Path(folder)
        await asyncio.to_thread(self._start)
        return Reach(
            packs=("http", "host"),
            pack_config={"http_allow": "127.0.0.1", "log_dirs": (str(self.logs),)},
        )

    @asynccontextmanager
    async def fault(self, name: str, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        if name not in self.faults:
            raise BackendError(f"http: no fault {name!r} (known: {', '.join(self.faults)})")
        facts = {
            "checkout_url": self.url("checkout"),
            "inventory_url": self.url("inventory"),
            "checkout_port": str(self.ports["checkout"]),
            "inventory_port": str(self.ports["inventory"]),
            "log_dir": str(self.logs),
        }
        try:
            if name == "bad_config_5xx":
                await asyncio.to_thread(self._bad_config)
                facts |= {"log": "checkout.log", "release": BAD_RELEASE}
            else:
                delay = float(params.get("delay_s", 2.0))
                await asyncio.to_thread(self._slow_inventory, delay)
                facts |= {"log": "inventory.log", "delay_ms": str(round(delay * 1000))}
            yield facts
        finally:
            await asyncio.to_thread(self._deploy, healthy_configs(self.ports["inventory"]))

    async def reset(self) -> None:
        await asyncio.to_thread(self._reset)

    async def stop(self) -> None:
        await asyncio.to_thread(self._stop)

    # -- blocking work (in a thread) --------------------------------------------------

    def _start(self, ports: Mapping[str, int] | None = None) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.folder / "conf").mkdir(parents=True, exist_ok=True)
        portfile = self.folder / "ports.json"
        portfile.unlink(missing_ok=True)
        args = [sys.executable, "-m", MODULE, "serve", str(self.folder)]
        if ports:
            args += [str(ports[s]) for s in SERVICES]
        with (self.folder / "serve.err").open("wb") as err:
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not portfile.exists():
            if self._proc.poll() is not None:
                said = (self.folder / "serve.err").read_text(errors="replace")[-1500:]
                code = self._proc.returncode
                raise BackendError(f"http: the services exited with {code}: {said}")
            if time.monotonic() > deadline:
                self._stop()
                raise BackendError("http: the services did not start in time")
            time.sleep(POLL_S)
        self.ports = {k: int(v) for k, v in json.loads(portfile.read_text()).items()}
        self._deploy(healthy_configs(self.ports["inventory"]))
        self._fresh_logs()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)

    def _reset(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start(self.ports or None)
            return
        self._deploy(healthy_configs(self.ports["inventory"]))
        self._fresh_logs()

    def _fresh_logs(self) -> None:
        """Each log as a service's start leaves it: where it serves."""
        for service in SERVICES:
            (self.logs / f"{service}.log").write_text(
                f"{_now()} INFO {service}: release {HEALTHY_RELEASE} serving on "
                f"http://127.0.0.1:{self.ports[service]} (GET /health)\n"
            )

    def _deploy(self, configs: Mapping[str, Mapping[str, Any]]) -> None:
        for service, config in configs.items():
            path = self.folder / "conf" / f"{service}.json"
            new = path.with_suffix(".json.new")
            new.write_text(json.dumps(config, indent=2) + "\n")
            os.replace(new, path)

    def _bad_config(self) -> None:
        configs = healthy_configs(self.ports["inventory"])
        checkout = dict(configs["checkout"])
        checkout["upstream_uri"] = checkout.pop("upstream_url")
        checkout["release"] = BAD_RELEASE
        self._deploy({"checkout": checkout})
        for _ in range(3):  # the traffic that hits it, so its log shows the failures
            try:
                with urllib.request.urlopen(self.url("checkout", "/"), timeout=5) as answer:
                    answer.read()
            except urllib.error.HTTPError:
                pass

    def _slow_inventory(self, delay: float) -> None:
        configs = healthy_configs(self.ports["inventory"])
        self._deploy({"inventory": {**configs["inventory"], "_query_s": delay}})


# -- the services (the child process) -------------------------------------------------


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


class _Service:
    """One service's config (read per request, reloads logged) and log."""

    def __init__(self, folder: Path, name: str) -> None:
        self.name = name
        self.conf = folder / "conf" / f"{name}.json"
        self.log_path = folder / "logs" / f"{name}.log"
        self._seen: tuple[int, int] | None = None

    def log(self, level: str, text: str) -> None:
        with self.log_path.open("a") as handle:
            handle.write(f"{_now()} {level} {self.name}: {text}\n")

    def config(self) -> dict[str, Any]:
        info = self.conf.stat()
        loaded: dict[str, Any] = json.loads(self.conf.read_text())
        stamp = (info.st_mtime_ns, info.st_ino)
        if stamp != self._seen:
            self._seen = stamp
            # Keys starting with "_" are the backend's own knobs (how slow the database is),
            # not the service's settings: never shown.
            keys = ", ".join(sorted(k for k in loaded if k != "release" and k[0] != "_"))
            self.log(
                "INFO",
                f"config reloaded from {self.conf} (release {loaded.get('release')}): {keys}",
            )
        return loaded


async def _serve(folder: Path, ports: list[int]) -> None:
    import aiohttp
    from aiohttp import web

    checkout, inventory = _Service(folder, "checkout"), _Service(folder, "inventory")
    session = aiohttp.ClientSession()

    async def checkout_handler(request: web.Request) -> web.Response:
        config = checkout.config()
        upstream = config.get("upstream_url")
        if not upstream:
            checkout.log(
                "ERROR",
                f"config: upstream_url missing in {checkout.conf} (release "
                f"{config.get('release')}); cannot call inventory; GET {request.path} -> 500",
            )
            return web.json_response({"error": "internal server error"}, status=500)
        began = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=float(config.get("upstream_timeout_s", 8)))
        try:
            async with session.get(upstream, timeout=timeout) as answer:
                status = answer.status
                await answer.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            checkout.log("ERROR", f"inventory at {upstream} failed: {exc!r}; -> 502")
            return web.json_response({"error": "bad gateway"}, status=502)
        took = round((time.monotonic() - began) * 1000)
        slow = took > SLOW_S * 1000
        if slow:
            checkout.log(
                "WARN", f"inventory answered {status} in {took} ms (slow); GET {request.path}"
            )
        else:
            checkout.log("INFO", f"GET {request.path} 200 (inventory {took} ms)")
        body = {
            "service": "checkout",
            "status": "degraded" if slow or status >= 400 else "ok",
            "release": config.get("release"),
            "dependencies": {"inventory": {"url": upstream, "status": status, "latency_ms": took}},
        }
        return web.json_response(body)

    async def inventory_handler(request: web.Request) -> web.Response:
        config = inventory.config()
        delay = float(config.get("_query_s", 0.0))
        await asyncio.sleep(delay)
        took = round(delay * 1000)
        if delay > SLOW_QUERY_S:
            inventory.log(
                "WARN",
                f"slow query ({took} ms): SELECT sku, qty FROM stock WHERE warehouse = 'eu-1' "
                "-- seq scan on stock (index stock_warehouse_idx missing)",
            )
        inventory.log("INFO", f"GET {request.path} 200 in {took} ms")
        return web.json_response(
            {"service": "inventory", "status": "ok", "skus": 1204, "db_query_ms": took}
        )

    runners = []
    bound: dict[str, int] = {}
    for (name, handler, paths), port in zip(
        (
            ("checkout", checkout_handler, ("/", "/health")),
            ("inventory", inventory_handler, ("/", "/health", "/stock")),
        ),
        ports or [0, 0],
        strict=True,
    ):
        app = web.Application()
        for path in paths:
            app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        runners.append(runner)
        bound[name] = runner.addresses[0][1]
    portfile = folder / "ports.json"
    portfile.with_suffix(".new").write_text(json.dumps(bound))
    os.replace(portfile.with_suffix(".new"), portfile)

    parent = os.getppid()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    while not stopping.is_set() and os.getppid() == parent:
        try:
            await asyncio.wait_for(stopping.wait(), 0.5)
        except TimeoutError:
            pass
    await session.close()
    for runner in runners:
        await runner.cleanup()


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4) or argv[0] != "serve":
        print(f"usage: python -m {MODULE} serve DIR [CHECKOUT_PORT INVENTORY_PORT]")
        return 2
    asyncio.run(_serve(Path(argv[1]), [int(p) for p in argv[2:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
