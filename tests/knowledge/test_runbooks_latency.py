"""How long a search takes (printed, never asserted: shared CI machines vary).

Run with ``-s`` to see the figures: index build, a no-change re-scan, and search p50/p99
for the 30-file corpus and for 1,000 synthetic sections (50 files of 20 sections).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bot.knowledge.runbooks import Runbooks
from tests.knowledge.runbook_corpus import PHRASINGS, write_corpus

WORDS = (
    "disk cpu memory pod node queue backlog certificate replica lag latency deploy rollback "
    "dns tls kafka redis postgres nginx upstream timeout restart crash eviction inode volume "
    "throttle limit scale drain kubelet journal socket connection pool index vacuum"
).split()


def synthetic(root: Path, *, files: int = 50, sections: int = 20) -> Path:
    for f in range(files):
        parts = [f"---\ntitle: Synthetic {f}\nalerts: [Synthetic{f}Alert]\n---\n# Synthetic {f}\n"]
        for s in range(sections - 1):
            a, b, c = (WORDS[(f * 7 + s * k) % len(WORDS)] for k in (1, 3, 5))
            steps = "\n".join(
                f"{n}. Check the {a} and the {b} of {c} number {n}." for n in range(1, 6)
            )
            parts.append(f"\n## {a.title()} {b} step {s}\n\nWhen {c} fails: {a} {b}.\n\n{steps}\n")
        (root / f"s{f:03d}.md").write_text("".join(parts))
    return root


def measure(runbooks: Runbooks, queries: list[str], rounds: int = 20) -> tuple[float, float]:
    took = []
    for _ in range(rounds):
        for query in queries:
            started = time.perf_counter()
            runbooks.search(query)
            took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.99) - 1]


def report(name: str, root: Path) -> None:
    started = time.perf_counter()
    runbooks = Runbooks(root)
    build = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    runbooks.refresh()
    rescan = (time.perf_counter() - started) * 1000
    queries = [q for q, _ in PHRASINGS] + ["disk cpu restart", "KubePodCrashLooping"]
    p50, p99 = measure(runbooks, queries)
    summary = runbooks.summary()
    print(
        f"\n{name}: {summary.files} files, {summary.sections} sections; build {build:.1f} ms, "
        f"re-scan {rescan:.2f} ms; search p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    assert summary.sections > 0


def test_latency_of_the_30_file_corpus(tmp_path: Path) -> None:
    report("30-file corpus", write_corpus(tmp_path))


def test_latency_of_1000_sections(tmp_path: Path) -> None:
    report("1,000 synthetic sections", synthetic(tmp_path))
