"""What starting ``opsloop`` costs: wall and CPU time (median of repeats, ms) of a fresh
``python -m bot …`` for ``--help``, ``serve --help`` and ``trace --help`` (the parser
alone), ``serve`` up to its settings check (no settings: it imports the whole service,
then exits 2), and ``import bot.service`` alone, against ``python -c pass`` (the floor:
the interpreter's own start) measured in the same run. The tests start a few hundred
such children; each one's start-up is CPU the suite pays.

    python benchmarks/cli_startup.py [--repeats N] [--before DIR]

``--before DIR`` also runs another checkout's ``bot`` (``git archive REV | tar -x -C
DIR``), interleaved with this one's, for a before/after comparison in the same run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120.0

# (label, arguments after the interpreter, the exit status it must end with)
CASES: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("python -c pass (floor)", ("-c", "pass"), 0),
    ("opsloop --help", ("-m", "bot", "--help"), 0),
    ("opsloop serve --help", ("-m", "bot", "serve", "--help"), 0),
    ("opsloop trace --help", ("-m", "bot", "trace", "--help"), 0),
    ("opsloop serve (to its settings check)", ("-m", "bot", "serve"), 2),
    ("import bot.service", ("-c", "import bot.service"), 0),
)


def run_once(args: tuple[str, ...], expected: int, source: Path) -> tuple[float, float]:
    """(wall s, CPU s of the child: user + system) of one ``python ARGS`` in a bare
    environment, as the test harness starts the bot."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(source)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args],
        cwd=source,
        env=env,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expected:
        raise SystemExit(
            f"python {' '.join(args)}: exit {done.returncode}, expected {expected}\n"
            + done.stderr.decode(errors="replace")[-2000:]
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs per command (default 7)")
    parser.add_argument("--before", type=Path, help="another checkout to run beside this one")
    options = parser.parse_args()
    if options.repeats < 1:
        parser.error("--repeats must be at least 1")
    sources = {"now": REPO}
    if options.before is not None:
        before = options.before.resolve()
        if not (before / "bot" / "__main__.py").is_file():
            parser.error(f"--before {before}: no bot/__main__.py there")
        sources = {"before": before, **sources}
    runs = [(name, label, args, code) for name in sources for label, args, code in CASES]
    for name, _, args, code in runs:  # warm-up: byte-compile, fill the page cache
        run_once(args, code, sources[name])
    walls: dict[tuple[str, str], list[float]] = {(n, label): [] for n, label, _, _ in runs}
    cpus: dict[tuple[str, str], list[float]] = {(n, label): [] for n, label, _, _ in runs}
    # Rounds interleave the commands, so a busy moment of the machine hits them all alike.
    for _ in range(options.repeats):
        for name, label, args, code in runs:
            wall, cpu = run_once(args, code, sources[name])
            walls[name, label].append(wall)
            cpus[name, label].append(cpu)
    floor = statistics.median(cpus["now", CASES[0][0]])
    print(
        f"start-up, median of {options.repeats} runs; "
        + ", ".join(f"{name}: {path}" for name, path in sources.items())
    )
    print(f"{'':7}{'command':40} {'wall ms':>8} {'CPU ms':>8} {'CPU × floor':>12}")
    for label, _, _ in CASES:
        for name in sources:
            cpu = statistics.median(cpus[name, label])
            print(
                f"{name:7}{label:40} {statistics.median(walls[name, label]) * 1000:>8.0f}"
                f" {cpu * 1000:>8.0f} {cpu / floor if floor else float('nan'):>12.1f}"
            )


if __name__ == "__main__":
    main()
