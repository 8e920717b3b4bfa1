"""`opsloop tools`: list, check and run, with exit codes scripts can use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RESTART = (
    "import os, sys; print('restarted', sys.argv[1], 'by', os.environ['OPSLOOP_CONFIRMED_BY'])"  # noqa: E501
)
WIPE = "import os, sys; print(('would wipe ' if os.environ.get('OPSLOOP_DRY_RUN') else 'wiped ') + sys.argv[1])"  # noqa: E501
TOOLS = f"""\
tools:
  - name: echo_host
    description: Echo a host name.
    parallel: true
    params:
      host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host name}}
      count: {{type: integer, min: 1, max: 3, default: 1, description: Repeats}}
    run: ["python3", "-c", "import sys; print(' '.join(sys.argv[1:]))", "{{host}}", "{{count}}"]
  - name: restart
    description: Pretend to restart.
    category: mutating
    params: {{host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host}}}}
    run: ["python3", "-c", "{RESTART}", "{{host}}"]
  - name: wipe
    description: Pretend to wipe.
    category: destructive
    params: {{host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host}}}}
    run: ["python3", "-c", "{WIPE}", "{{host}}"]
  - name: fails
    description: Always fails.
    run: ["python3", "-c", "import sys; sys.exit('broken')"]
"""


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.yml"
    path.write_text(TOOLS)
    return path


def opsloop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "OPSLOOP_PACKS": ""},
        check=False,
    )


def test_check_accepts_a_good_file(tools_file: Path) -> None:
    done = opsloop("tools", "check", str(tools_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 tools, OK" in done.stdout


def test_check_names_line_and_tool_of_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(TOOLS.replace("min: 1, max: 3", "min: 3, max: 1"))
    done = opsloop("tools", "check", str(bad))
    assert done.returncode == 2
    assert f"{bad}:" in done.stdout and "tool 'echo_host'" in done.stdout


def test_list_shows_every_tool(tools_file: Path) -> None:
    done = opsloop("tools", "--file", str(tools_file), "list")
    assert done.returncode == 0
    for name in ("echo_host", "restart", "wipe", "fails", "destructive", "mutating"):
        assert name in done.stdout


def test_run_a_read_only_tool_with_typed_params(tools_file: Path) -> None:
    done = opsloop("tools", "--file", str(tools_file), "run", "echo_host", "host=web-03", "count=2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "web-03 2"


@pytest.mark.parametrize(
    "params",
    [["host=web;rm -rf /"], ["count=9", "host=web"], ["nohost=1"], ["host"]],
)
def test_bad_params_are_refused_before_running(tools_file: Path, params: list[str]) -> None:
    done = opsloop("tools", "--file", str(tools_file), "run", "echo_host", *params)
    assert done.returncode == 2
    assert "error:" in done.stdout


def test_a_mutating_tool_needs_confirmed_by(tools_file: Path) -> None:
    refused = opsloop("tools", "--file", str(tools_file), "run", "restart", "host=web-03")
    assert refused.returncode == 2 and "--confirmed-by" in refused.stdout
    done = opsloop(
        "tools",
        "--file",
        str(tools_file),
        "run",
        "restart",
        "host=web-03",
        "--confirmed-by",
        "U1",
        "--unrecorded",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "restarted web-03 by U1"


def test_a_change_without_redis_runs_with_a_warning_that_it_is_not_recorded(
    tools_file: Path,
) -> None:
    # Trying a tools.yml on a laptop has no Redis: the change runs, and stderr says it
    # left no ledger entry or trace (``--unrecorded`` silences that).
    done = opsloop(
        "tools", "--file", str(tools_file), "run", "restart", "host=web-03", "--confirmed-by", "U1"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "restarted web-03 by U1"
    assert "REDIS_URL is not set" in done.stderr and "no ledger entry or trace" in done.stderr
    quiet = opsloop(
        "tools",
        "--file",
        str(tools_file),
        "run",
        "restart",
        "host=web-03",
        "--confirmed-by",
        "U1",
        "--unrecorded",
    )
    assert quiet.returncode == 0 and "warning" not in quiet.stderr
    # A read-only tool is never recorded, so it is never warned of.
    read = opsloop("tools", "--file", str(tools_file), "run", "echo_host", "host=web-03")
    assert (read.returncode, read.stdout.strip()) == (0, "web-03 1")
    assert "warning" not in read.stderr


def test_confirmed_by_is_not_a_parameter(tools_file: Path) -> None:
    done = opsloop(
        "tools", "--file", str(tools_file), "run", "restart", "host=web-03", "confirmed_by=U1"
    )
    assert done.returncode == 2 and "--confirmed-by" in done.stdout


def test_a_destructive_tool_shows_its_dry_run_and_needs_yes(tools_file: Path) -> None:
    base = ["tools", "--file", str(tools_file), "run", "wipe", "host=db-1", "--confirmed-by", "U1"]
    base.append("--unrecorded")
    dry = opsloop(*base)
    assert dry.returncode == 2
    assert "would wipe db-1" in dry.stdout and "wiped db-1" not in dry.stdout.replace("would ", "")
    done = opsloop(*base, "--yes")
    assert done.returncode == 0 and "wiped db-1" in done.stdout


def test_a_failing_tool_exits_1(tools_file: Path) -> None:
    done = opsloop("tools", "--file", str(tools_file), "run", "fails")
    assert done.returncode == 1
    assert "Error: exit 1: broken" in done.stdout
