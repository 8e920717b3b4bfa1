"""The demo service "web" of ``opsloop dev``: a small local HTTP service that degrades.

    python -m bot.dev.demo_service serve --port N --dir STATE_DIR [--healthy-for 20]
    python -m bot.dev.demo_service restart --dir STATE_DIR [--approved-by U…] [--wait S]
    python -m bot.dev.demo_service metrics --dir STATE_DIR
    python -m bot.dev.demo_service status --dir STATE_DIR

``serve`` answers ``GET /`` (a line of text), ``GET /health`` and ``GET /metrics`` (JSON) on
127.0.0.1. It is healthy for ``--healthy-for`` seconds, then degraded until it stops: ``/``
and ``/health`` take 1.5–2.5 s and about 30 % of them answer 500, and a background thread
burns about 60 % of one core in short slices (``--cpu-share``; ``OPSLOOP_DEV_DEMO_CPU`` for
the processes ``start_service`` starts, kept across restarts). A fresh process starts
healthy, so a restart "fixes" it. A built-in client sends it a few requests a second, so its
metrics and log have traffic to show. Its metrics describe the state it is in: the requests
that finished since it began (start or degradation), at most the last minute (``window_s``);
with none, the rates are null, not 0. It writes ``web.pid``, ``web.json`` (its arguments,
which ``restart`` reuses), ``web.log`` (rotated at 1 MiB) and ``web.err`` (its stderr) in
STATE_DIR, and nothing anywhere else.

``restart`` and ``metrics`` are what the demo tools run (``metrics`` prints
:func:`summary_line` first, then the JSON; ``restart`` takes the approver from
``--approved-by`` or the ``OPSLOOP_CONFIRMED_BY`` a command tool gets), ``status`` is for
people; ``start_service`` and ``stop_service`` are what ``opsloop dev`` calls. Before
any signal, the pid in the pidfile must be a ``bot.dev.demo_service serve`` process of the
same STATE_DIR (``/proc/PID/cmdline``): a stale pidfile naming someone else's process is
ignored.

This module owns the service's processes (started, stopped and restarted: only ours, by
pid) and its command line; the process itself (what it serves, how it degrades, its
metrics) is ``bot.dev.demo_web``'s, whose names this module re-exports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.dev.demo_web import (
    ARGSFILE,
    DEFAULT_CPU_SHARE,
    ERRFILE,
    HOST,
    LOGFILE,
    PIDFILE,
    WebState,
    read_pid,
    serve,
    summary_line,
)
from bot.errors import OpsloopError

MODULE = "bot.dev.demo_service"
CPU_SETTING = "OPSLOOP_DEV_DEMO_CPU"
DEFAULT_HEALTHY_FOR_S = 20.0
# A restarted process stays healthy at least this long, so the fix can be verified
# (and seen on the page) even when the first one was told to degrade at once.
RESTARTED_HEALTHY_FOR_S = 120.0

START_TIMEOUT_S = 15.0  # for a new process to answer /health
STOP_TIMEOUT_S = 5.0  # between SIGTERM and SIGKILL
KILL_TIMEOUT_S = 2.0
POLL_S = 0.05


__all__ = [
    "ARGSFILE",
    "ERRFILE",
    "HOST",
    "LOGFILE",
    "MODULE",
    "PIDFILE",
    "RESTARTED_HEALTHY_FOR_S",
    "Restarted",
    "ServiceError",
    "WebState",
    "alive",
    "child_env",
    "fetch_metrics",
    "main",
    "read_args",
    "read_pid",
    "restart",
    "running_pid",
    "serve",
    "service_port",
    "start_service",
    "stop_service",
    "summary_line",
]


class ServiceError(OpsloopError):
    """The demo service could not be started, stopped or reached."""


# -- processes: only ours, by pid ---------------------------------------------------

# Processes this process started (pid → its state folder and Popen), reaped when they end.
_children: dict[int, tuple[Path, subprocess.Popen[bytes]]] = {}


def read_args(state_dir: Path) -> dict[str, Any]:
    """The arguments the last ``serve`` ran with (``port``, ``healthy_for``, ``cpu_share``)."""
    try:
        data = json.loads((state_dir / ARGSFILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ServiceError(f"no demo service was set up in {state_dir} ({ARGSFILE})") from None
    return {
        "port": int(data["port"]),
        "healthy_for": float(data["healthy_for"]),
        "cpu_share": float(data.get("cpu_share", DEFAULT_CPU_SHARE)),
    }


def service_port(state_dir: Path) -> int:
    """The port the service of ``state_dir`` listens on (after ``--port 0`` too)."""
    return int(read_args(state_dir.resolve())["port"])


def alive(pid: int) -> bool:
    """Running (a zombie is not). Our own child is asked with ``poll``, which also reaps
    it, so that no ``Popen`` is ever dropped before its exit status was read."""
    child = _children.get(pid)
    if child is not None:
        if child[1].poll() is None:
            return True
        del _children[pid]
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def is_ours(pid: int, state_dir: Path) -> bool:
    """``pid`` is a live ``bot.dev.demo_service serve`` process of ``state_dir``."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    if MODULE not in args or "serve" not in args or "--dir" not in args:
        return False
    where = args.index("--dir") + 1
    if where >= len(args) or args[where] != str(state_dir.resolve()):
        return False
    return alive(pid)


def running_pid(state_dir: Path) -> int | None:
    """The pid of this folder's service if it is running, else ``None``."""
    pid = read_pid(state_dir)
    return pid if pid is not None and is_ours(pid, state_dir) else None


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _terminate(pid: int) -> None:
    """SIGTERM, a bounded wait, then SIGKILL; ``ServiceError`` if it still runs."""
    for sig, timeout in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, KILL_TIMEOUT_S)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        if _wait_gone(pid, timeout):
            return
    raise ServiceError(f"web: pid {pid} did not exit, even after SIGKILL")


def _package_root() -> str:
    """The folder holding the ``bot`` package this code runs from."""
    return str(Path(__file__).resolve().parents[2])


def child_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for ``python -m bot.dev.demo_service``: this checkout's ``bot`` first."""
    env = dict(os.environ if environ is None else environ)
    paths = [_package_root(), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def cpu_share_setting(environ: Mapping[str, str] | None = None) -> float:
    """``OPSLOOP_DEV_DEMO_CPU``: the share of one core the degraded service burns (0-0.9,
    default 0.6; the tests, which run many stacks on two cores, turn it down)."""
    raw = (os.environ if environ is None else environ).get(CPU_SETTING, "")
    try:
        return min(max(float(raw), 0.0), 0.9) if raw.strip() else DEFAULT_CPU_SHARE
    except ValueError:
        return DEFAULT_CPU_SHARE


def _spawn(
    state_dir: Path, port: int, healthy_for: float, cpu_share: float
) -> subprocess.Popen[bytes]:
    """A detached ``serve`` (its own session: it outlives a tool call's process group)."""
    argv = [sys.executable, "-m", MODULE, "serve", "--port", str(port)]
    argv += ["--dir", str(state_dir), "--healthy-for", repr(healthy_for)]
    argv += ["--cpu-share", repr(cpu_share)]
    with open(state_dir / ERRFILE, "ab") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=state_dir,
            env=child_env(),
            start_new_session=True,
        )
    _children[proc.pid] = (state_dir, proc)
    return proc


def _get(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://{HOST}:{port}{path}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def fetch_metrics(port: int, timeout: float = 3.0) -> dict[str, Any]:
    status, body = _get(port, "/metrics", timeout)
    if status != 200:
        raise ServiceError(f"web: /metrics answered HTTP {status}")
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ServiceError("web: /metrics did not answer a JSON object")
    return data


def _wait_started(proc: subprocess.Popen[bytes], state_dir: Path, timeout: float) -> int:
    """The new process's pid once its pidfile is written and ``/health`` answers."""
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            _children.pop(proc.pid, None)
            raise ServiceError(f"web exited at start (exit {code}): {_err_tail(state_dir)}")
        if read_pid(state_dir) == proc.pid:
            try:
                _get(service_port(state_dir), "/health", timeout=5.0)
                return proc.pid
            except (OSError, ServiceError):
                pass
        if time.monotonic() >= deadline:
            _stop_pid(proc.pid)
            raise ServiceError(f"web did not answer /health within {timeout:g} s")
        time.sleep(POLL_S)


def _stop_pid(pid: int) -> None:
    """Stop one process this module started (used when it never came up)."""
    if alive(pid):
        _terminate(pid)


def _err_tail(state_dir: Path) -> str:
    try:
        lines = (state_dir / ERRFILE).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


def start_service(state_dir: Path, port: int, healthy_for: float = DEFAULT_HEALTHY_FOR_S) -> int:
    """Start "web" on ``port`` (0: any free one, see ``service_port``); its pid once it
    answers. A service left running in ``state_dir`` by an earlier run is stopped first."""
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    stop_service(state_dir)
    proc = _spawn(state_dir, port, healthy_for, cpu_share_setting())
    return _wait_started(proc, state_dir, START_TIMEOUT_S)


def stop_service(state_dir: Path) -> None:
    """Stop the service of ``state_dir`` (the pid in its pidfile, if it is ours) and any
    process this module started for it; idempotent."""
    state_dir = state_dir.resolve()
    pid = running_pid(state_dir)
    if pid is not None:
        _terminate(pid)
    if read_pid(state_dir) is not None and running_pid(state_dir) is None:
        (state_dir / PIDFILE).unlink(missing_ok=True)  # stale: names nothing of ours
    for child_pid, (folder, child) in list(_children.items()):
        if folder == state_dir:
            if alive(child_pid):
                _terminate(child_pid)
            child.wait(timeout=KILL_TIMEOUT_S)
            _children.pop(child_pid, None)


# -- the commands the demo tools run ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Restarted:
    old_pid: int | None
    new_pid: int
    state: str


def restart(state_dir: Path, *, wait_s: float = START_TIMEOUT_S) -> Restarted:
    """Replace the running process (if any) with a fresh one on the same port, waiting at
    most ``wait_s`` for it to answer."""
    state_dir = state_dir.resolve()
    args = read_args(state_dir)
    old = running_pid(state_dir)
    if old is not None:
        _terminate(old)
    healthy_for = max(args["healthy_for"], RESTARTED_HEALTHY_FOR_S)
    proc = _spawn(state_dir, args["port"], healthy_for, args["cpu_share"])
    new = _wait_started(proc, state_dir, wait_s)
    try:
        state = str(fetch_metrics(args["port"]).get("state", "unknown"))
    except (OSError, ValueError, ServiceError):
        state = "answering"
    return Restarted(old_pid=old, new_pid=new, state=state)


def _restart_command(state_dir: Path, approved_by: str, wait_s: float) -> int:
    done = restart(state_dir, wait_s=wait_s)
    # A Slack user id as a mention, which Slack (and opsloop's task cards) show as a name.
    who = f"<@{approved_by}>" if re.fullmatch(r"[UW][A-Z0-9]+", approved_by) else approved_by
    by = f" (approved by {who})" if who else ""
    if done.old_pid is None:
        print(f"web was not running: started pid {done.new_pid}, {done.state}{by}")
    else:
        print(f"restarted web: pid {done.old_pid} → {done.new_pid}, {done.state}{by}")
    return 0


def _metrics_command(state_dir: Path) -> int:
    state_dir = state_dir.resolve()
    m = fetch_metrics(service_port(state_dir))
    print(summary_line(m))
    print(json.dumps(m, indent=2))
    return 0


def _status_command(state_dir: Path) -> int:
    state_dir = state_dir.resolve()
    pid = running_pid(state_dir)
    if pid is None:
        print("web: not running")
        return 1
    m = fetch_metrics(service_port(state_dir))
    up = f"up {m['uptime_s']:.0f} s"
    print(f"web: pid {pid}, {up}, {m['state']}, port {m['port']} ({summary_line(m)})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}", description='The demo service "web" of opsloop dev.'
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve_p = sub.add_parser("serve", help="run the service (in the foreground)")
    serve_p.add_argument("--port", type=int, required=True)
    serve_p.add_argument("--healthy-for", type=float, default=DEFAULT_HEALTHY_FOR_S)
    serve_p.add_argument("--cpu-share", type=float, default=DEFAULT_CPU_SHARE)
    restart_p = sub.add_parser("restart", help="replace the running process with a fresh one")
    restart_p.add_argument(
        "--approved-by",
        default=os.environ.get("OPSLOOP_CONFIRMED_BY", ""),
        help="who approved it (default: OPSLOOP_CONFIRMED_BY, which opsloop sets)",
    )
    restart_p.add_argument(
        "--wait",
        type=float,
        default=START_TIMEOUT_S,
        help=f"seconds to wait for the new process to answer (default {START_TIMEOUT_S:g})",
    )
    metrics_p = sub.add_parser("metrics", help="the metrics: a summary line, then the JSON")
    status_p = sub.add_parser("status", help="pid, uptime and state")
    for p in (serve_p, restart_p, metrics_p, status_p):
        p.add_argument("--dir", type=Path, required=True, help="the dev mode's state folder")
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return serve(
                port=args.port,
                state_dir=args.dir,
                healthy_for=args.healthy_for,
                cpu_share=args.cpu_share,
            )
        if args.command == "restart":
            return _restart_command(args.dir, args.approved_by, args.wait)
        if args.command == "metrics":
            return _metrics_command(args.dir)
        return _status_command(args.dir)
    except (ServiceError, OSError) as exc:
        print(f"web: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
