"""What each built-in pack's tools answer in a recorded incident situation, byte for byte.

Each case renders a recorded backend answer (``golden/<pack>/*.json``, or a ``/proc``
tree) through the pack's own summary and compares it with ``golden/<pack>/*.txt``, so that
a change to a summary is a visible diff in review. Where a live server answers (``http``),
its port is normalised and latencies come from a fake timer. Regenerate after an
intended change with ``OPSLOOP_UPDATE_GOLDEN=1`` (see ``golden.py``) and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.tools.packs.golden import GOLDEN_DIR, assert_golden
from tools.netpolicy import AddressPolicy
from tools.packs import host as host_pack
from tools.packs import host_proc
from tools.packs.alertmanager import alerts_summary as am_alerts_summary
from tools.packs.alertmanager import silences_summary
from tools.packs.host import CpuTimes, Row, cpu_summary, disk_summary, top_summary
from tools.packs.host_logs import LogFiles
from tools.packs.host_proc import Mount, Proc, Usage, fit_command
from tools.packs.http import HttpChecker
from tools.packs.prometheus import (
    alerts_summary,
    query_summary,
    range_summary,
    targets_summary,
)
from tools.packs.supervisor import Supervisor
from tools.packs.supervisor_rpc import SupervisorFault

# The moment the recorded answers were taken.
NOW = datetime(2026, 12, 1, 16, 20, 0, tzinfo=UTC)


def recorded(pack: str, name: str) -> Any:
    return json.loads((GOLDEN_DIR / pack / name).read_text(encoding="utf-8"))


def golden(pack: str, name: str) -> Path:
    return GOLDEN_DIR / pack / f"{name}.txt"


# -- host ---------------------------------------------------------------------------


async def test_host_memory_under_pressure_with_swap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_proc, "PROC", str(GOLDEN_DIR / "host" / "proc_memory_pressure"))
    assert_golden(golden("host", "memory_pressure"), await host_pack.host_memory_text())


def test_host_cpu_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_proc, "PROC", str(GOLDEN_DIR / "host" / "proc_cpu_busy"))
    monkeypatch.setattr(host_pack.os, "sched_getaffinity", lambda _: set(range(8)))
    before = CpuTimes(8_000, 100, 2_000, 50_000, 300, 10, 40, 0)
    # 400 ticks over 0.5 s on 8 cores: 300 user, 50 system, 30 iowait, 20 idle.
    after = CpuTimes(8_300, 100, 2_045, 50_020, 330, 12, 43, 0)
    assert_golden(golden("host", "cpu_busy"), cpu_summary(before, after, cores=8, seconds=0.5))


def test_host_disk_nearly_full_by_space_and_by_inodes() -> None:
    fixture = recorded("host", "disk_nearly_full.json")
    rows = [
        (
            Mount(source=m["source"], point=m["point"], fstype=m["fstype"]),
            Usage(
                device=i,
                size=m["size"],
                used=m["used"],
                avail=m["avail"],
                inodes=m["inodes"],
                inodes_used=m["inodes_used"],
            ),
        )
        for i, m in enumerate(fixture["mounts"])
    ]
    text = disk_summary(rows, fixture["unreadable"])
    assert_golden(golden("host", "disk_nearly_full"), text)


def test_host_top_processes_name_and_identifying_command() -> None:
    fixture = recorded("host", "top_processes_by_cpu.json")
    rows = [
        Row(
            proc=Proc(
                pid=r["pid"],
                comm=r["comm"],
                state=r["state"],
                ticks=0,
                start=0,
                rss=r["rss"],
                uid=0,
            ),
            cpu=r["cpu"],
            command=fit_command(r["argv"]) or f"[{r['comm']}]",
            user=r["user"],
        )
        for r in fixture["rows"]
    ]
    text = top_summary(
        rows,
        processes=fixture["processes"],
        by=fixture["by"],
        seconds=fixture["seconds"],
        total_memory=fixture["total_memory"],
    )
    assert_golden(golden("host", "top_processes_by_cpu"), text)


def test_host_tail_log(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text(
        "2026-12-01T16:19:57Z INFO  request id=7f3a path=/api/v1/orders status=200 ms=41\n"
        "2026-12-01T16:19:58Z \x1b[31mERROR\x1b[0m request id=7f3b path=/api/v1/payments "
        'status=503 ms=10002 err="upstream timeout: billing-db:5432"\n'
        "2026-12-01T16:19:59Z WARN  pool exhausted: 50/50 connections in use, 212 waiting\n"
    )
    modified = NOW.timestamp() - 1
    os.utime(log, (modified, modified))
    text = LogFiles([str(tmp_path)]).tail("app.log", 100)
    # The header says how long ago the file changed; that depends on when the test runs.
    text = text.replace(str(tmp_path), "/var/log/app", 1)
    text = re.sub(r"UTC, [^)]* ago\)", "UTC, <ago>)", text, count=1)
    assert_golden(golden("host", "tail_log"), text)


# -- http ---------------------------------------------------------------------------


@pytest.fixture
async def site() -> AsyncIterator[str]:
    """An API with a healthy, a slow, a redirecting and an overloaded endpoint (how slow
    is the checker's timer's to say, see ``Ticks``)."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version": "2026.12.1-4711"})

    async def slow(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "db": "slow"})

    async def old(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/v2/status")

    async def v2(request: web.Request) -> web.Response:
        raise web.HTTPFound("/login?next=/v2/status")

    async def login(request: web.Request) -> web.Response:
        return web.Response(text="<html><title>Sign in</title><body>Sign in</body></html>",
                            content_type="text/html")  # fmt: skip

    async def overloaded(request: web.Request) -> web.Response:
        return web.Response(
            status=503,
            headers={"Retry-After": "120"},
            text='{"error": "upstream billing-db: too many connections"}',
            content_type="application/json",
        )

    app = web.Application()
    for path, handler in {
        "/healthz": healthz,
        "/slow": slow,
        "/status": old,
        "/v2/status": v2,
        "/login": login,
        "/checkout": overloaded,
    }.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


class Ticks:
    """A timer for the checker that moves on by ``step`` seconds at each reading, so
    every latency it reports is a whole number of steps whatever the machine's load."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.now = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize(
    ("path", "step"), [("healthz", 0.0121), ("slow", 4.5), ("status", 0.0121), ("checkout", 0.0034)]
)
async def test_http_check(site: str, path: str, step: float) -> None:
    checker = HttpChecker(AddressPolicy(["127.0.0.1"]), timer=Ticks(step))
    try:
        text = await checker.check(f"{site}/{path}")
    finally:
        await checker.aclose()
    assert_golden(golden("http", path), text.replace(site, "http://127.0.0.1:PORT"))


# -- prometheus ---------------------------------------------------------------------


def test_prometheus_targets_few_are_each_named() -> None:
    data = recorded("prometheus", "targets_few.json")["data"]
    assert_golden(golden("prometheus", "targets_few"), targets_summary(data["activeTargets"], NOW))


def test_prometheus_targets_many_are_counted_with_the_unhealthy_named() -> None:
    data = recorded("prometheus", "targets_many.json")["data"]
    text = targets_summary(data["activeTargets"], NOW)
    assert_golden(golden("prometheus", "targets_many"), text)


def test_prometheus_query_with_many_series_shows_the_largest() -> None:
    data = recorded("prometheus", "query_many_series.json")["data"]
    query = 'sum by (instance, route, code) (rate(http_requests_total{code=~"5.."}[5m]))'
    assert_golden(golden("prometheus", "query_many_series"), query_summary(query, data))


def test_prometheus_query_range_summarises_each_series() -> None:
    data = recorded("prometheus", "query_range_latency.json")["data"]
    query = "histogram_quantile(0.99, sum by (le, instance, job) (rate(http_duration_bucket[5m])))"
    text = range_summary(query, data["result"], window=3600, step=15)
    assert_golden(golden("prometheus", "query_range_latency"), text)


def test_prometheus_alerts_firing_then_pending() -> None:
    data = recorded("prometheus", "alerts.json")["data"]
    assert_golden(golden("prometheus", "alerts"), alerts_summary(data["alerts"], NOW))


# -- alertmanager -------------------------------------------------------------------


def test_alertmanager_alerts_firing_and_silenced() -> None:
    alerts = recorded("alertmanager", "alerts_firing_and_silenced.json")
    assert_golden(
        golden("alertmanager", "alerts_firing_and_silenced"), am_alerts_summary(alerts, NOW)
    )


def test_alertmanager_silences() -> None:
    silences = recorded("alertmanager", "silences.json")
    assert_golden(golden("alertmanager", "silences"), silences_summary(silences, NOW))


# -- supervisor ---------------------------------------------------------------------


class RecordedSupervisor:
    """Answers the XML-RPC calls ``supervisor_status`` makes from a recording:
    ``getAllProcessInfo``, and the stderr log tails (stdout ones are empty)."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording

    async def call(self, method: str, *params: Any) -> Any:
        if method == "supervisor.getAllProcessInfo":
            return self.recording["getAllProcessInfo"]
        if method == "supervisor.tailProcessStderrLog":
            text = self.recording["logs"].get(params[0])
            if text is None:
                raise SupervisorFault(20, f"NO_FILE: {params[0]}")
            return [text, len(text), False]
        if method == "supervisor.tailProcessStdoutLog":
            return ["", 0, False]
        raise AssertionError(f"unexpected call {method}{params}")


@pytest.mark.parametrize("name", [None, "worker"])
async def test_supervisor_status_with_a_crash_looping_program(name: str | None) -> None:
    supervisor = Supervisor(RecordedSupervisor(recorded("supervisor", "status_crash_loop.json")))  # type: ignore[arg-type]
    text = await supervisor.status(name)
    assert_golden(golden("supervisor", f"status_crash_loop_{name or 'all'}"), text)


# -- the helper itself ----------------------------------------------------------------


def test_a_difference_fails_with_a_diff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPSLOOP_UPDATE_GOLDEN", raising=False)
    path = tmp_path / "pack" / "case.txt"
    with pytest.raises(pytest.fail.Exception, match="no golden file .*OPSLOOP_UPDATE_GOLDEN=1"):
        assert_golden(path, "one\ntwo\n")
    path.parent.mkdir()
    path.write_text("one\ntwo\n")
    assert_golden(path, "one\ntwo")  # one final newline either way
    with pytest.raises(pytest.fail.Exception) as caught:
        assert_golden(path, "one\nthree\n")
    assert "-two\n+three" in str(caught.value)


def test_regenerating_rewrites_the_file_and_still_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPSLOOP_UPDATE_GOLDEN", "1")
    path = tmp_path / "pack" / "case.txt"
    with pytest.raises(pytest.fail.Exception, match="golden created: "):
        assert_golden(path, "new")
    assert path.read_text() == "new\n"
    with pytest.raises(pytest.fail.Exception, match="golden unchanged: "):
        assert_golden(path, "new")
    with pytest.raises(pytest.fail.Exception, match="golden rewritten: "):
        assert_golden(path, "newer")
    assert path.read_text() == "newer\n"
