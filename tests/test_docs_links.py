"""Every relative link in README.md and docs/*.md points to a file that exists, and every
``#anchor`` to a heading of that file (as GitHub makes anchors), so moving the reference
around cannot leave a reader at a dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(markdown: str) -> str:
    """The text outside code fences and inline code, where links are links."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(markdown: str) -> set[str]:
    """GitHub's anchor of each heading (duplicates get -1, -2, …)."""
    found: set[str] = set()
    for line in prose(markdown.replace("`", "")).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            n, unique = 0, slug
            while unique in found:
                n += 1
                unique = f"{slug}-{n}"
            found.add(unique)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    markdown = page.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(prose(markdown)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading")
    assert broken == [], broken


def test_anchors_are_made_as_github_makes_them() -> None:
    made = anchors("# A `b` pack\n## Before going live: `opsloop check`\n## x\n## x\n")
    assert made == {"a-b-pack", "before-going-live-opsloop-check", "x", "x-1"}
