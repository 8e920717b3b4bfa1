"""The folder is re-read when it changes, without a new ``Runbooks`` (no restart)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from bot.knowledge.runbooks import Runbooks
from tests.knowledge.runbook_corpus import BROKEN, BROKEN_LINE, write_corpus


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def touch_later(path: Path) -> None:
    """A new mtime for sure, even on a filesystem with coarse timestamps."""
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 2_000_000_000))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "runbooks")


def test_an_edited_file_changes_the_results(folder: Path, clock: FakeClock) -> None:
    runbooks = Runbooks(folder, clock=clock)
    assert runbooks.search("flamegraph")[0:1] == []
    path = folder / "linux" / "high-cpu.md"
    path.write_text(path.read_text() + "\n## Profile with a flamegraph\n\nRun `perf record -g`.\n")
    touch_later(path)
    clock.now += 1.0
    hit = runbooks.search("flamegraph")[0]
    assert hit.ref == "linux/high-cpu.md#profile-with-a-flamegraph"
    assert "perf record -g" in runbooks.read(hit.ref)


def test_a_check_is_made_at_most_once_per_interval(folder: Path, clock: FakeClock) -> None:
    runbooks = Runbooks(folder, clock=clock)
    (folder / "new.md").write_text("# Flamegraph\n\nprofile it\n")
    clock.now += 0.5
    assert runbooks.search("flamegraph") == []  # checked less than a second ago
    clock.now += 0.5
    assert runbooks.search("flamegraph")[0].ref == "new.md#flamegraph"


def test_a_deleted_file_is_dropped(folder: Path, clock: FakeClock) -> None:
    runbooks = Runbooks(folder, clock=clock)
    assert runbooks.search("kafka lag per partition")[0].path == "queues/kafka-lag.md"
    (folder / "queues" / "kafka-lag.md").unlink()
    clock.now += 1.0
    assert all(h.path != "queues/kafka-lag.md" for h in runbooks.search("kafka lag partition"))
    assert runbooks.summary().files == 28
    with pytest.raises(ValueError, match="no runbook"):
        runbooks.read("queues/kafka-lag.md")


def test_a_new_alert_name_is_seen_by_for_alert(folder: Path, clock: FakeClock) -> None:
    runbooks = Runbooks(folder, clock=clock)
    assert runbooks.for_alert("DiskWillFillIn4Hours") is None
    (folder / "disk-forecast.md").write_text(
        "---\nalerts: [DiskWillFillIn4Hours]\n---\n# Disk will fill\n\nExtend it.\n"
    )
    clock.now += 1.0
    found = runbooks.for_alert("DiskWillFillIn4Hours")
    assert found is not None and found.ref == "disk-forecast.md"


def test_refresh_reports_whether_anything_changed(folder: Path) -> None:
    runbooks = Runbooks(folder)
    assert runbooks.refresh() is False
    touch_later(folder / "redis" / "memory.md")
    assert runbooks.refresh() is True
    assert runbooks.refresh() is False


def test_a_broken_file_warns_once_naming_file_and_line(
    folder: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bot.knowledge.runbooks")
    runbooks = Runbooks(folder, clock=clock)
    for _ in range(3):  # changes elsewhere rebuild the index; the broken file is not retold
        touch_later(folder / "redis" / "memory.md")
        clock.now += 1.0
        runbooks.search("disk")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"{BROKEN}, line {BROKEN_LINE}" in warnings[0]
    assert runbooks.summary().files == 29  # the rest is indexed
    assert runbooks.skipped[0].line == BROKEN_LINE

    # once per change of that file: edited and still broken, it is told again
    touch_later(folder / BROKEN)
    clock.now += 1.0
    runbooks.search("disk")
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_a_fixed_file_joins_the_index(folder: Path, clock: FakeClock) -> None:
    runbooks = Runbooks(folder, clock=clock)
    (folder / BROKEN).write_text(
        "---\ntitle: Fixed\n---\n# Fixed\n\n## Never indexed\n\nNow it is.\n"
    )
    clock.now += 1.0
    assert runbooks.search("never indexed")[0].path == BROKEN
    assert runbooks.summary().skipped == ()
