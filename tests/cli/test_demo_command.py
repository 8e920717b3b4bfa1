"""``opsloop demo`` as a real process: the installed ``opsloop`` script (so this also proves
the ``[project.scripts]`` entry point), with the approval given on the command line.

An approved run shows the two read-only calls, the approval it asked for, the restart
carrying the approver, and the answer; a denied one shows the approval and the answer
without the restart ever starting."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

WAIT_S = 60.0

READS = ('  → host_cpu({"host": "web-03"})', '  → tail_log({"host": "web-03", "lines": 50})')
ASKED = 'Approval needed: restart_service({"host": "web-03", "service": "nginx"})'
WRITE = '  → restart_service({"host": "web-03", "service": "nginx", "confirmed_by": "U_DEMO"})'


def opsloop_script() -> str:
    """The console script pip installed next to this interpreter (else the one on PATH)."""
    beside = Path(sys.executable).with_name("opsloop")
    found = str(beside) if beside.exists() else shutil.which("opsloop")
    assert found, "no `opsloop` script: install the package first (pip install -e '.[dev]')"
    return found


def demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [opsloop_script(), "demo", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=cwd,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        check=False,
    )


def test_approved_restart_runs_and_is_reported(tmp_path: Path) -> None:
    done = demo("--approve", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for line in (*READS, ASKED, WRITE, "  ← restart_service: ok"):
        assert line in lines, done.stdout
    # Read first, then ask, then write, then answer.
    order = [lines.index(line) for line in (*READS, ASKED, WRITE)]
    assert order == sorted(order), done.stdout
    answer = next(line for line in lines if line.startswith("opsloop: "))
    assert answer.startswith("opsloop: Restarted nginx on web-03 (approved by U_DEMO)")
    assert lines.index(answer) > lines.index(WRITE)
    # The change was checked by a read after it (else the job ends incomplete, as in the bot).
    assert lines[lines.index(WRITE) + 2 :].count('  → host_cpu({"host": "web-03"})') == 1
    assert lines[-1] == "[completed: 4 iterations, 4 tool runs]"


def test_denied_restart_ends_without_the_write(tmp_path: Path) -> None:
    done = demo("--deny", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for line in (*READS, ASKED, "  ← restart_service: error"):
        assert line in lines, done.stdout
    assert not [line for line in lines if line.startswith("  → restart_service(")], done.stdout
    assert "restarted nginx" not in done.stdout.lower()
    answer = next(line for line in lines if line.startswith("opsloop: "))
    assert answer.startswith("opsloop: The restart was not approved, so nothing changed.")
    assert lines[-1] == "[completed: 3 iterations, 2 tool runs]"


def test_without_a_terminal_it_approves(tmp_path: Path) -> None:
    done = demo(cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert WRITE in done.stdout.splitlines()
    assert "Approve? [y/N]" not in done.stdout
