"""A runbooks folder that is a symlink swapped to a new checkout (git-sync's way: a new
folder, the link renamed over the old one, the old folder deleted) is followed: the next
re-read indexes the new checkout, and nothing is reported unlistable."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bot.knowledge.runbooks import Runbooks


def checkout(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "web.md").write_text(f"# Web\n\n## Restart\n\n{text}\n")
    return folder


def point(link: Path, target: Path) -> None:
    fresh = link.with_name(link.name + ".new")
    fresh.symlink_to(target)
    os.replace(fresh, link)  # atomic, as git-sync does it


def test_a_swapped_link_is_followed_to_the_new_checkout(tmp_path: Path) -> None:
    old = checkout(tmp_path, "rev-1", "drain the node before restarting")
    link = tmp_path / "current"
    point(link, old)
    runbooks = Runbooks(link, refresh_interval=0)
    assert [h.ref for h in runbooks.search("drain node")] == ["web.md#restart"]

    new = checkout(tmp_path, "rev-2", "page the database team before restarting")
    point(link, new)
    shutil.rmtree(old)

    assert runbooks.refresh() is True
    assert runbooks.skipped == []
    assert [h.ref for h in runbooks.search("database team")] == ["web.md#restart"]
    assert runbooks.search("drain node") == []
