"""``opsloop tools list`` as a real process whose stdout is a pipe (no terminal, no
``COLUMNS``): every tool's name, source and description appear whole (not cut to the
80 columns a pipe used to get), and ``--json`` prints one JSON document of the tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tools.packs import PACK_TOOLS

PACKS = ("host", "http", "prometheus", "alertmanager", "supervisor")
NAMES = sorted(name for pack in PACKS for name in PACK_TOOLS[pack])


def opsloop_tools(*args: str) -> subprocess.CompletedProcess[str]:
    # No COLUMNS and no terminal: what `opsloop tools list | grep …` or a CI log gets.
    # The backends are never reached: listing builds the packs, it calls nothing.
    return subprocess.run(
        [sys.executable, "-m", "bot", "tools", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONIOENCODING": "utf-8",
            "OPSLOOP_PACKS": ",".join(PACKS),
            "PROMETHEUS_URL": "http://127.0.0.1:9",
            "ALERTMANAGER_URL": "http://127.0.0.1:9",
            "SUPERVISOR_URL": "http://127.0.0.1:9/RPC2",
        },
        check=False,
    )


def test_a_piped_list_shows_every_name_whole() -> None:
    done = opsloop_tools("list")
    assert done.returncode == 0, done.stdout + done.stderr
    # One row per tool, on one line: its name, category and source whole on it.
    rows = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("│")}
    assert sorted(rows) == NAMES, done.stdout
    for name in NAMES:
        pack = next(p for p in PACKS if name in PACK_TOOLS[p])
        assert f"built-in:{pack}" in rows[name], rows[name]
    assert "…" not in done.stdout, done.stdout
    assert "mutating" in rows["supervisor_restart"]
    # Each description's first line is whole on its tool's row.
    listed = json.loads(opsloop_tools("list", "--json").stdout)
    for tool in listed:
        first_line = tool["description"].splitlines()[0]
        assert first_line in rows[tool["name"]], (first_line, rows[tool["name"]])


def test_list_json_is_one_document_of_every_tool() -> None:
    done = opsloop_tools("list", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    assert isinstance(listed, list)
    assert [tool["name"] for tool in listed] == NAMES
    for tool in listed:
        assert set(tool) >= {
            "name",
            "category",
            "category_reason",
            "parallel",
            "timeout_s",
            "source",
            "description",
        }, tool
        assert tool["category"] in ("read_only", "mutating", "destructive"), tool
        assert isinstance(tool["parallel"], bool), tool
        assert isinstance(tool["timeout_s"], int | float), tool
        assert tool["source"].startswith("built-in:"), tool
        assert tool["description"], tool
    by_name = {tool["name"]: tool for tool in listed}
    assert by_name["prometheus_query_range"]["source"] == "built-in:prometheus"
    assert by_name["supervisor_restart"]["category"] == "mutating"
    assert by_name["host_cpu"]["category"] == "read_only"
    assert by_name["host_cpu"]["category_reason"] is None


def test_list_json_with_no_tools_is_an_empty_list() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bot", "tools", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=90,
        env={"PATH": os.environ["PATH"], "OPSLOOP_PACKS": ""},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == []
    assert "OPSLOOP_PACKS" in done.stderr
