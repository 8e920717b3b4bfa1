"""The demo tools of ``opsloop dev``: a tools.yml whose four tools act on the real "web".

    web_health    read-only  http     GET http://127.0.0.1:PORT/health: status and latency
    web_metrics   read-only  command  python -m bot.dev.demo_service metrics --dir STATE_DIR
    web_logs      read-only  command  tail -n LINES STATE_DIR/web.log
    web_restart   mutating   command  python -m bot.dev.demo_service restart --dir STATE_DIR
                                      --wait {wait_s}

The http tool reaches 127.0.0.1 only when ``OPSLOOP_HTTP_ALLOW`` allows it (``opsloop dev``
sets it). ``web_metrics`` prints the metrics' one-line summary first (what a step's card
shows: the failure share, not ``HTTP 200 OK``), then the JSON. The python tools run this
checkout's ``bot`` (``PYTHONPATH`` in their ``env``, since command tools get a clean
environment); the restart reads the approver from ``OPSLOOP_CONFIRMED_BY`` (set for an
approved call) and prints it, so its command line carries no placeholder. Nothing here names a path
outside the state folder, nor any process but the service it started.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from bot.dev.demo_service import LOGFILE, MODULE, child_env

TOOL_NAMES = ("web_health", "web_metrics", "web_logs", "web_restart")
TOOLS_FILE = "tools.yml"
DEFAULT_LOG_LINES = 40
MAX_LOG_LINES = 200

HEADER = """\
# The demo tools of `opsloop dev` (written by bot/dev/demo_tools.py; rewritten at start).
# Check it with: opsloop tools check {path}
"""


def _literal(text: str) -> str:
    """``text`` as a template element that means itself (braces are placeholders)."""
    return text.replace("{", "{{").replace("}", "}}")


def _env_literal(text: str) -> str:
    """``text`` as an env value that means itself (``${`` references the environment)."""
    return text.replace("${", "$${")


def _service_argv(python: str, command: str, state_dir: Path) -> list[str]:
    return [_literal(python), "-m", MODULE, command, "--dir", _literal(str(state_dir))]


def _service_env() -> dict[str, str]:
    return {"PYTHONPATH": _env_literal(child_env({})["PYTHONPATH"])}


def tools_spec(state_dir: Path, *, port: int, python: str = sys.executable) -> dict[str, Any]:
    """The tools.yml content as data."""
    state_dir = state_dir.resolve()
    base = f"http://127.0.0.1:{int(port)}"
    return {
        "tools": [
            {
                "name": "web_health",
                "kind": "http",
                "description": (
                    'Health check of the service "web": GET /health, with the HTTP status '
                    "and how long it took. Healthy is HTTP 200 in well under a second."
                ),
                "category": "read_only",
                "parallel": True,
                "timeout": 10,
                "request": {"method": "GET", "url": f"{base}/health"},
            },
            {
                "name": "web_metrics",
                "description": (
                    'Metrics of the service "web": a one-line summary, then the JSON: state, '
                    "pid, uptime, requests, error rate, p50/p95 latency in ms and CPU, over "
                    "the current state (since it began, at most the last minute: window_s)."
                ),
                "category": "read_only",
                "parallel": True,
                "timeout": 10,
                "run": _service_argv(python, "metrics", state_dir),
                "env": _service_env(),
                "cwd": str(state_dir),
            },
            {
                "name": "web_logs",
                "description": (
                    'The last lines of the log of the service "web": starts and stops, '
                    "state changes, failed and slow requests, a summary every 10 s."
                ),
                "category": "read_only",
                "parallel": True,
                "timeout": 10,
                "params": {
                    "lines": {
                        "type": "integer",
                        "min": 1,
                        "max": MAX_LOG_LINES,
                        "default": DEFAULT_LOG_LINES,
                        "description": "How many lines from the end",
                    }
                },
                "run": ["tail", "-n", "{lines}", "--", _literal(str(state_dir / LOGFILE))],
            },
            {
                "name": "web_restart",
                "description": (
                    'Restart the service "web": stop its process, start a fresh one on the '
                    "same port and wait until it answers. Prints the old and new pid."
                ),
                "category": "mutating",
                "timeout": 30,
                "params": {
                    "wait_s": {
                        "type": "integer",
                        "min": 1,
                        "max": 25,
                        "default": 15,
                        "description": "Seconds to wait for the new process to answer",
                    }
                },
                "run": [*_service_argv(python, "restart", state_dir), "--wait", "{wait_s}"],
                "env": _service_env(),
                "cwd": str(state_dir),
            },
        ]
    }


def write_tools_file(state_dir: Path, *, port: int, python: str = sys.executable) -> Path:
    """Write ``STATE_DIR/tools.yml`` for the service on ``port``; its path."""
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / TOOLS_FILE
    body = yaml.safe_dump(
        tools_spec(state_dir, port=port, python=python),
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    path.write_text(HEADER.format(path=path) + body, encoding="utf-8")
    return path
