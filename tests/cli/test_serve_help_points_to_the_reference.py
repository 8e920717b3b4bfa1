"""``opsloop serve --help`` (and ``socket --help``) as a real process: it names the
configuration reference, ``docs/configuration.md``, a file of the repository naming every
variable the settings read (``tests/test_docs_configuration.py`` checks its table both ways)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.settings import PURPOSES

REPO = Path(__file__).resolve().parents[2]
REFERENCE = "docs/configuration.md"


@pytest.mark.parametrize("command", ["serve", "socket"])
def test_help_names_the_configuration_reference(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bot", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "COLUMNS": "100"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert REFERENCE in " ".join(done.stdout.split()), done.stdout


def test_the_reference_is_a_file_naming_every_variable() -> None:
    reference = (REPO / REFERENCE).read_text(encoding="utf-8")
    missing = [name for name in PURPOSES if f"| `{name}` |" not in reference]
    assert missing == [], missing  # every variable the settings read has its row
