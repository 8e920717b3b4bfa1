"""``opsloop tools list|check|run`` include MCP tools; ``list`` says why a tool has its
category (override, annotation, default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def opsloop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={"PATH": os.environ["PATH"], "COLUMNS": "250", "OPSLOOP_PACKS": ""},
        check=False,
    )


def write(tmp_path: Path, time_server: list[str]) -> Path:
    path = tmp_path / "tools.yml"
    path.write_text(
        "mcp_servers:\n"
        f"  - name: time\n    command: {json.dumps(time_server)}\n"
        "    trust_annotations: true\n"
        "    tools: {convert_time: {category: mutating}}\n"
    )
    return path


def test_list_shows_category_and_why(tmp_path: Path, time_server: list[str]) -> None:
    done = opsloop("tools", "--file", str(write(tmp_path, time_server)), "list")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if "time_" in line}
    assert "read_only (annotation)" in lines["time_get_current_time"]
    assert "mutating (override)" in lines["time_convert_time"]
    assert "mcp:time" in lines["time_get_current_time"]


def test_list_json_says_why(tmp_path: Path, time_server: list[str]) -> None:
    done = opsloop("tools", "--file", str(write(tmp_path, time_server)), "list", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = {tool["name"]: tool for tool in json.loads(done.stdout)}
    assert listed["time_get_current_time"]["category"] == "read_only"
    assert listed["time_get_current_time"]["category_reason"] == "annotation"
    assert listed["time_convert_time"]["category_reason"] == "override"
    assert listed["time_convert_time"]["source"] == "mcp:time"


def test_check_and_run(tmp_path: Path, time_server: list[str]) -> None:
    path = write(tmp_path, time_server)
    done = opsloop("tools", "check", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 tools, OK" in done.stdout
    done = opsloop("tools", "--file", str(path), "run", "time_get_current_time", "timezone=UTC")
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"timezone": "UTC"' in done.stdout
