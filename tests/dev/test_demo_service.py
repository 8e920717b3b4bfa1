"""The demo service "web" and its tools, as real processes on loopback.

The service starts healthy and degrades on its timer (slow or failing /health, CPU burn
bounded below one core); ``restart`` replaces the process (new pid, same port, healthy
again), also when the old one is not our child; ``stop_service`` leaves no process; the
pidfile guard never signals a process that is not this folder's service. The tools.yml
passes ``opsloop tools check`` and its four tools run against the service through
``python -m bot tools run``, the restart for real.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.dev import demo_service as service
from bot.dev.demo_tools import TOOL_NAMES, write_tools_file

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 15.0  # for conditions polled below: a hang becomes a failure


def wait_until(predicate: Callable[[], bool], *, timeout: float = BOUND_S, what: str) -> None:
    """Poll ``predicate`` (every 50 ms) until it holds, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {timeout:g} s")
        time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time the kernel has counted for ``pid`` (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def leftovers(state_dir: Path) -> list[int]:
    """Live ``bot.dev.demo_service`` processes naming ``state_dir`` (zombies are not alive)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if service.MODULE in args and str(state_dir.resolve()) in args:
            if service.alive(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A dev folder; whatever service runs in it is stopped after the test, and the
    test fails if a process is still left then."""
    folder = (tmp_path / "dev").resolve()
    yield folder
    service.stop_service(folder)
    left = leftovers(folder)
    for pid in left:  # ours: started for this folder by this test
        os.kill(pid, 9)
    assert left == [], f"processes left behind: {left}"


def get(port: int, path: str) -> tuple[int, str, float]:
    """(status, body, seconds) of one GET on the service."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            status, body = r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    return status, body, time.perf_counter() - started


def metrics(port: int) -> dict[str, Any]:
    status, body, _ = get(port, "/metrics")
    assert status == 200
    data = json.loads(body)
    assert isinstance(data, dict)
    return data


def wait_degraded(port: int) -> None:
    wait_until(lambda: metrics(port)["state"] == "degraded", what="degraded")


def run_module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPSLOOP_")}
    base["PYTHONPATH"] = str(REPO)
    base["COLUMNS"] = "500"  # rich wraps the CLI's output at the terminal's width
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
        check=False,
    )


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def set_healthy_for(state_dir: Path, seconds: float) -> None:
    """What the next restart runs with (``restart`` reuses web.json): long enough that
    "healthy again" cannot turn into "degraded again" while a test looks."""
    path = state_dir / service.ARGSFILE
    args = json.loads(path.read_text())
    path.write_text(json.dumps({**args, "healthy_for": seconds}))


# -- the service ----------------------------------------------------------------------


def test_healthy_then_degraded(state_dir: Path) -> None:
    pid = service.start_service(state_dir, 0, healthy_for=2)
    port = service.service_port(state_dir)

    assert service.read_pid(state_dir) == pid
    assert service.running_pid(state_dir) == pid
    status, body, seconds = get(port, "/health")
    assert (status, body) == (200, "ok\n")
    assert seconds < 1.0
    first = metrics(port)
    assert first["pid"] == pid
    assert first["cpu_burn"] == "off"

    wait_degraded(port)
    status, body, seconds = get(port, "/health")
    assert status == 500 or seconds >= 1.5, (status, seconds)
    assert status in (200, 500)
    # The burn is real and bounded: busy, but less than one core. Real: the kernel counts
    # the process's CPU time growing by a whole burn second (how fast depends on what else
    # the machine runs, so no share of wall time is asked for); bounded: its own measure.
    burnt = cpu_seconds(pid)
    wait_until(lambda: cpu_seconds(pid) - burnt >= 1.0, what="burning CPU", timeout=60.0)
    now = metrics(port)
    assert now["cpu_burn"] == "on"
    assert 0 < float(now["cpu_percent"]) < 95
    assert float(now["p95_ms"]) >= 1000  # the built-in client's requests are slow too
    log = (state_dir / service.LOGFILE).read_text()
    assert f"started: pid {pid}" in log
    assert "stuck in a busy loop" in log


def test_restart_replaces_the_process_and_it_is_healthy_again(state_dir: Path) -> None:
    old = service.start_service(state_dir, 0, healthy_for=1)
    port = service.service_port(state_dir)
    wait_degraded(port)
    set_healthy_for(state_dir, 60)

    done = run_module(
        "bot.dev.demo_service", "restart", "--dir", str(state_dir), "--approved-by=U1"
    )

    assert done.returncode == 0, done.stderr
    new = service.read_pid(state_dir)
    assert new is not None and new != old
    assert done.stdout.strip() == f"restarted web: pid {old} → {new}, healthy (approved by <@U1>)"
    assert not service.alive(old)
    assert service.running_pid(state_dir) == new
    assert cmdline(new)[cmdline(new).index("--port") + 1] == str(port)
    assert metrics(port)["pid"] == new
    assert metrics(port)["state"] == "healthy"
    status, _, seconds = get(port, "/health")
    assert status == 200 and seconds < 1.0
    # A second restart replaces a process that is not our child at all.
    again = run_module("bot.dev.demo_service", "restart", "--dir", str(state_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"restarted web: pid {new} → ")
    assert not service.alive(new)
    status_cmd = run_module("bot.dev.demo_service", "status", "--dir", str(state_dir))
    assert status_cmd.returncode == 0
    assert f"web: pid {service.read_pid(state_dir)}, up " in status_cmd.stdout
    assert ", healthy, " in status_cmd.stdout


def test_stop_service_leaves_no_process(state_dir: Path) -> None:
    first = service.start_service(state_dir, 0, healthy_for=30)
    done = run_module("bot.dev.demo_service", "restart", "--dir", str(state_dir))
    assert done.returncode == 0, done.stderr
    second = service.read_pid(state_dir)
    assert second is not None and leftovers(state_dir) == [second]

    service.stop_service(state_dir)

    assert not service.alive(first)
    assert not service.alive(second)  # gone, or a zombie until init reaps it
    assert leftovers(state_dir) == []
    assert not (state_dir / service.PIDFILE).exists()
    service.stop_service(state_dir)  # idempotent
    status = run_module("bot.dev.demo_service", "status", "--dir", str(state_dir))
    assert (status.returncode, status.stdout) == (1, "web: not running\n")


def test_pidfile_guard_never_signals_a_process_that_is_not_ours(
    state_dir: Path, tmp_path: Path
) -> None:
    other_dir = (tmp_path / "other").resolve()
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        other = service.start_service(other_dir, 0, healthy_for=30)
        service.start_service(state_dir, 0, healthy_for=30)
        for foreign in (stranger.pid, other, os.getpid()):
            (state_dir / service.PIDFILE).write_text(f"{foreign}\n")
            assert service.running_pid(state_dir) is None
            service.stop_service(state_dir)
            assert stranger.poll() is None
            assert service.alive(other)
            assert not (state_dir / service.PIDFILE).exists()  # stale: removed
        (state_dir / service.PIDFILE).write_text(f"{stranger.pid}\n")
        done = run_module("bot.dev.demo_service", "restart", "--dir", str(state_dir))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("web was not running: started pid ")
        assert stranger.poll() is None
        assert service.alive(other)
    finally:
        stranger.kill()
        stranger.wait()
        service.stop_service(other_dir)
    assert leftovers(other_dir) == []


def test_a_taken_port_is_reported(state_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(service.ServiceError, match=f"cannot listen on 127.0.0.1:{port}"):
            service.start_service(state_dir, port, healthy_for=30)
    assert leftovers(state_dir) == []


# -- the tools --------------------------------------------------------------------------

ALLOW = {"OPSLOOP_HTTP_ALLOW": "127.0.0.1"}


def tool(path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = run_module(
        "bot", "tools", "--file", str(path), "run", *args, env=ALLOW if env is None else env
    )
    return done.returncode, done.stdout + done.stderr


def test_tools_file_passes_opsloop_tools_check(state_dir: Path) -> None:
    path = write_tools_file(state_dir, port=8123)

    done = run_module("bot", "tools", "check", str(path))

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{path}: 4 tools, OK" in done.stdout
    listed = run_module("bot", "tools", "--file", str(path), "list")
    assert listed.returncode == 0
    for name in TOOL_NAMES:
        assert name in listed.stdout
    assert re.search(r"web_restart\s+│ mutating", listed.stdout)
    assert "127.0.0.1:8123" in path.read_text()


def test_the_tools_act_on_the_real_service(state_dir: Path) -> None:
    service.start_service(state_dir, 0, healthy_for=60)
    port = service.service_port(state_dir)
    path = write_tools_file(state_dir, port=port)

    code, out = tool(path, "web_health")
    assert code == 0, out
    assert re.match(r"HTTP 200 OK in \d+ ms\nok", out)
    code, out = tool(path, "web_health", env={})  # loopback needs OPSLOOP_HTTP_ALLOW
    assert code == 1 and "refused" in out
    # Now a process that degrades soon; the restart below is healthy for minutes.
    service.stop_service(state_dir)
    old = service.start_service(state_dir, port, healthy_for=0.5)
    wait_degraded(port)
    code, out = tool(path, "web_metrics")
    assert code == 0, out
    assert out.startswith("web is degraded: "), out  # the line a step's card shows
    shown = json.loads(out[out.index("{") :])
    assert (shown["state"], shown["pid"], shown["cpu_burn"]) == ("degraded", old, "on")
    code, out = tool(path, "web_logs", "lines=200")
    assert code == 0, out
    assert "stuck in a busy loop" in out
    assert len(out.splitlines()) <= 200
    code, out = tool(path, "web_restart")
    assert code == 2 and "--confirmed-by" in out  # mutating: never without an approver
    assert service.read_pid(state_dir) == old

    code, out = tool(path, "web_restart", "--confirmed-by", "U123", "--unrecorded")

    assert code == 0, out
    new = service.read_pid(state_dir)
    assert new is not None and new != old
    assert f"restarted web: pid {old} → {new}, " in out
    assert "(approved by <@U123>)" in out  # a mention: Slack shows the name
    assert not service.alive(old)
    assert service.read_args(state_dir)["healthy_for"] >= service.RESTARTED_HEALTHY_FOR_S
    code, out = tool(path, "web_logs", "lines=3")
    assert code == 0 and len(out.strip().splitlines()) == 3
