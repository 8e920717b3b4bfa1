"""``opsloop demo`` as a real process: the installed ``opsloop`` script (so this also proves
the ``[project.scripts]`` entry point), telling the dev page's story — alice's mention about
"web", the health and metrics checks, the approval card, the decision, the answer.

The card waits for a key in a terminal (a pseudo-terminal here): Enter approves, ``d``
denies, and nothing is restarted before the key. ``--yes`` (or ``--approve``) and
``--deny`` answer without asking; with stdin not a terminal and neither flag, the card says
how to approve and is denied."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

WAIT_S = 60.0  # a hang guard, not a speed bound
REPO = Path(__file__).resolve().parents[2]

MENTION = "alice: @opsloop web is slow, look into it"
HEALTH, METRICS, RESTART = "  → web_health()", "  → web_metrics()", "  → web_restart()"
CARD = "│ Approval needed: web_restart"
KEYS = "Enter: approve · d: deny"


def opsloop_script() -> str:
    """The console script pip installed next to this interpreter (else the one on PATH)."""
    beside = Path(sys.executable).with_name("opsloop")
    found = str(beside) if beside.exists() else shutil.which("opsloop")
    assert found, "no `opsloop` script: install the package first (pip install -e '.[dev]')"
    return found


def environment() -> dict[str, str]:
    # PYTHONPATH: this checkout, whichever checkout the script was installed from.
    return {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(REPO), "NO_COLOR": "1"}


def demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [opsloop_script(), "demo", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=cwd,
        env=environment(),
        check=False,
    )


def in_order(lines: list[str], *wanted: str) -> None:
    """Each of ``wanted`` is a line (or starts one), in this order."""
    at = -1
    for text in wanted:
        found = next((i for i in range(at + 1, len(lines)) if lines[i].startswith(text)), None)
        assert found is not None, f"{text!r} not after line {at}:\n" + "\n".join(lines)
        at = found


def answer(lines: list[str]) -> str:
    return " ".join(" ".join(lines[lines.index("opsloop:") + 1 :]).split())


@pytest.mark.parametrize("flag", ["--yes", "--approve"])
def test_approved_the_story_runs_to_a_healthy_web(flag: str, tmp_path: Path) -> None:
    done = demo(flag, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    in_order(
        lines,
        MENTION,
        HEALTH,
        METRICS,
        CARD,
        "│ Reason",
        "│ Will run",
        "│ Requested by alice · mutating · approver: bob",
        "✓ Approved by bob",
        RESTART,
        "  ← web_restart: ok",
        HEALTH,  # the change is checked before the answer
        "opsloop:",
    )
    assert KEYS not in done.stdout  # nobody was asked
    said = answer(lines)
    assert said.startswith("web is healthy again."), said
    assert "approved by bob" in said, said
    assert lines[-1] == "[completed: 5 iterations, 5 tool runs]"


def test_denied_nothing_is_restarted(tmp_path: Path) -> None:
    done = demo("--deny", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    in_order(lines, MENTION, HEALTH, METRICS, CARD, "✗ Denied by bob", "opsloop:")
    assert RESTART not in lines and "  ← web_restart: error" in lines
    assert answer(lines).startswith("I did not restart web"), answer(lines)


def test_without_a_terminal_the_card_says_how_to_approve_and_is_denied(tmp_path: Path) -> None:
    done = demo(cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    in_order(
        lines,
        CARD,
        "stdin is not a terminal, so nobody can press a key: the card is denied.",
        "it, run `opsloop demo --yes`",
        "opsloop:",
    )
    assert RESTART not in lines and KEYS not in done.stdout
    assert answer(lines).startswith("I did not restart web"), answer(lines)


class Terminal:
    """``opsloop demo`` on a pseudo-terminal: read what it shows, press keys."""

    def __init__(self, cwd: Path) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [opsloop_script(), "demo"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=environment(),
            close_fds=True,
        )
        os.close(slave)
        self.shown = ""

    def read_until(self, text: str, times: int = 1) -> str:
        deadline = time.monotonic() + WAIT_S
        while self.shown.count(text) < times:
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.shown}"
            ready, _, _ = select.select([self.master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the process closed the terminal
                    chunk = b""
                assert chunk, f"ended without {text!r}:\n{self.shown}"
                self.shown += re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", chunk.decode(errors="replace"))
        return self.shown

    def press(self, key: bytes) -> None:
        os.write(self.master, key)

    def close(self) -> int:
        code = self.proc.wait(timeout=WAIT_S)
        os.close(self.master)
        return code


@pytest.mark.parametrize(
    ("key", "decision", "restarted"),
    [(b"\r", "✓ Approved by bob", True), (b"d", "✗ Denied by bob", False)],
)
def test_in_a_terminal_the_card_waits_for_a_key(
    key: bytes, decision: str, restarted: bool, tmp_path: Path
) -> None:
    terminal = Terminal(tmp_path)
    try:
        before = terminal.read_until(KEYS)
        assert terminal.proc.poll() is None  # waiting, not finished
        assert CARD in before and "web_restart: " not in before  # nothing ran yet
        terminal.press(b"x")  # not a key of the card: it asks again
        terminal.read_until(KEYS, times=2)
        terminal.press(key)
        shown = terminal.read_until("[completed: ")
    finally:
        code = terminal.close()
    assert code == 0, shown
    lines = [line.rstrip("\r") for line in shown.split("\n")]
    in_order(lines, MENTION, HEALTH, METRICS, CARD, decision, "opsloop:")
    assert (RESTART in lines) is restarted, shown
