"""Golden-output comparison for the packs' tool outputs.

A golden file holds, byte for byte, what a tool answers for a recorded situation, so that the
next change to a summary is a visible diff in review. Use it from any pack's test::

    from tests.tools.packs.golden import GOLDEN_DIR, assert_golden

    assert_golden(GOLDEN_DIR / "kubernetes" / "pods_crashlooping.txt", text)

To regenerate after an intended change, run the test with ``OPSLOOP_UPDATE_GOLDEN=1``: each
compared file is rewritten and its test *fails*, saying so, so a regenerate is never silently
green; run again without the variable and review ``git diff`` of the golden files.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE_ENV = "OPSLOOP_UPDATE_GOLDEN"


def _updating() -> bool:
    return os.environ.get(UPDATE_ENV, "") not in ("", "0")


def _as_file(text: str) -> str:
    # A golden file ends with exactly one newline, whatever the tool's text ends with, so
    # that editors and `git diff` stay quiet about the last line.
    return text.rstrip("\n") + "\n"


def assert_golden(path: Path, text: str) -> None:
    """Fail unless ``path`` holds ``text``; with OPSLOOP_UPDATE_GOLDEN=1 rewrite it and fail."""
    wanted = _as_file(text)
    if _updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        before = path.read_text(encoding="utf-8") if path.exists() else None
        path.write_text(wanted, encoding="utf-8")
        state = "unchanged" if before == wanted else ("created" if before is None else "rewritten")
        pytest.fail(
            f"golden {state}: {path} ({UPDATE_ENV} is set; run again without it and review "
            "the diff)",
            pytrace=False,
        )
    if not path.exists():
        pytest.fail(
            f"no golden file {path}; create it with {UPDATE_ENV}=1 and review it.\n"
            f"actual output:\n{wanted}",
            pytrace=False,
        )
    expected = path.read_text(encoding="utf-8")
    if expected == wanted:
        return
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=f"{path} (golden)",
            tofile="actual",
        )
    )
    pytest.fail(
        f"output differs from golden {path}\n{diff}\n"
        f"If the change is intended, regenerate with {UPDATE_ENV}=1 and review the diff.",
        pytrace=False,
    )
