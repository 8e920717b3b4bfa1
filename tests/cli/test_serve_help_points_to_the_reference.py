"""``opsloop serve --help`` (and ``socket --help``) as a real process: it names the
configuration reference, and that anchor is a heading of the README (as GitHub makes
anchors), the section naming every variable the settings read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.settings import PURPOSES

REPO = Path(__file__).resolve().parents[2]
REFERENCE = "README.md#configuration-reference"


def anchors(markdown: str) -> dict[str, int]:
    """GitHub's anchor of each heading → its line number."""
    found = {}
    for number, line in enumerate(markdown.splitlines()):
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading[1].strip().lower())
            found.setdefault(text.replace(" ", "-"), number)
    return found


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


def test_the_anchor_is_the_readme_section_listing_the_variables() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = anchors(readme)
    assert "configuration-reference" in found, sorted(found)
    section = readme.splitlines()[found["configuration-reference"] :]
    body = "\n".join(section[1:])
    body = body[: body.find("\n## ")] if "\n## " in body else body
    missing = [name for name in PURPOSES if f"`{name}`" not in body]
    assert missing == [], missing  # every variable the settings read is in the reference
