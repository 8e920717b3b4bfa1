"""``opsloop tools list`` as a real process with nothing configured (no tools.yml, no
packs): instead of an empty table it names every built-in pack with what it needs and its
tools, and shows a line to try — which, run as shown, lists tools."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from tools.packs import PACK_NAMES, PACK_TOOLS

REPO = Path(__file__).resolve().parents[2]


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "PYTHONIOENCODING": "utf-8", **env},
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_nothing_configured_names_the_packs_and_an_example() -> None:
    done = run([sys.executable, "-m", "bot", "tools", "list"], env={})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "│" not in done.stdout, done.stdout  # no empty table
    for pack in PACK_NAMES:
        row = next((line for line in lines if line.split()[:1] == [pack]), None)
        assert row is not None, done.stdout
        assert PACK_TOOLS[pack][0] in row, row  # what it brings
    prometheus = next(line for line in lines if line.split()[:1] == ["prometheus"])
    assert "PROMETHEUS_URL" in prometheus, prometheus  # what it needs
    example = next(line.strip() for line in lines if "OPSLOOP_PACKS=host,http" in line)
    assert example == "OPSLOOP_PACKS=host,http opsloop tools list", done.stdout

    # The example works as shown: the two packs' tools are listed.
    assignment, *command = shlex.split(example)
    name, _, value = assignment.partition("=")
    assert command[0] == "opsloop"
    tried = run([sys.executable, "-m", "bot", *command[1:]], env={name: value})
    assert tried.returncode == 0, tried.stdout + tried.stderr
    for tool in (*PACK_TOOLS["host"], *PACK_TOOLS["http"]):
        assert tool in tried.stdout, tried.stdout


def test_json_stays_one_document_and_the_hint_goes_to_stderr() -> None:
    done = run([sys.executable, "-m", "bot", "tools", "list", "--json"], env={})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert "OPSLOOP_PACKS=host,http" in done.stderr, done.stderr
