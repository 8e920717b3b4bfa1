"""The packs' tool names are DESIGN's, and `opsloop tools check` knows them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools.packs import PACK_NAMES, PACK_TOOLS, PackConfig, load_packs


def test_every_pack_builds_exactly_the_tools_it_declares(tmp_path: Path) -> None:
    config = PackConfig(
        log_dirs=(str(tmp_path),),
        prometheus_url="http://127.0.0.1:9",
        alertmanager_url="http://127.0.0.1:9",
        supervisor_url="http://127.0.0.1:9",
        postgres_url="postgresql://u@127.0.0.1:9/x",
    )
    assert set(PACK_TOOLS) == set(PACK_NAMES)
    for name, pack in load_packs(list(PACK_NAMES), config).items():
        assert sorted(t.name for t in pack.tools) == sorted(PACK_TOOLS[name]), name


def test_tools_check_accepts_allowlists_naming_packs_and_their_tools(tmp_path: Path) -> None:
    path = tmp_path / "tools.yml"
    path.write_text(
        "tools:\n"
        "  - name: ping\n"
        "    description: Ping.\n"
        '    run: ["echo", "pong"]\n'
        "toolsets:\n"
        "  look: [ping, host_cpu, prometheus_query]\n"
        "channels:\n"
        "  C1: [look, supervisor, http_check]\n"
        "  C2: [no_such_tool]\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "bot", "tools", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "channels.C2 names unknown tool or toolset 'no_such_tool'" in done.stdout
    path.write_text(path.read_text().replace("  C2: [no_such_tool]\n", ""))
    done = subprocess.run(
        [sys.executable, "-m", "bot", "tools", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
