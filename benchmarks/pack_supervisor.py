"""The supervisor pack against a local supervisord: time to answer ``supervisor_status``
and the size of the answer the model reads.

A real ``supervisord`` (``bot/emulator/supervisor_server.py``) runs with a small
set of programs (5 processes: one running program, a group of two, one exited, one
not started) and a larger one (50 processes). For each, ``supervisor_status`` for every
program and for one program is called through the tool's ``execute`` (argument
validation, one XML-RPC call over HTTP, formatting). Reported: median and p90 wall time
per call, and the answer's size in characters and tokens (≈ characters / 4).

    python benchmarks/pack_supervisor.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bot.agent.tools import CallContext
from bot.emulator.supervisor_server import ManagedSupervisor, Program
from tools.packs import Pack, PackConfig
from tools.packs.supervisor import build

CTX = CallContext(job_id="C1:1.1:bench", call_id="bench")
GROUP = {"process_name": "%(program_name)s_%(process_num)02d"}


def small() -> list[Program]:
    return [
        Program("web"),
        Program("worker", options={**GROUP, "numprocs": "2"}),
        Program("batch", script="import sys; sys.exit(3)", settles_as="EXITED"),
        Program("idle", options={"autostart": "false"}),
    ]


def large() -> list[Program]:
    programs = [Program(f"svc{i:02d}") for i in range(20)]
    programs += [Program(f"pool{i}", options={**GROUP, "numprocs": "10"}) for i in range(3)]
    return programs


async def measure(pack: Pack, args: dict[str, str], calls: int) -> tuple[list[float], str]:
    status = next(t for t in pack.tools if t.name == "supervisor_status")
    text = ""
    for _ in range(10):  # warm up: connection, imports
        text = str(await status.execute(status.args_model.model_validate(args), CTX))
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        text = str(await status.execute(status.args_model.model_validate(args), CTX))
        times.append((time.perf_counter() - t0) * 1000)
    return times, text


async def run(sup: ManagedSupervisor, label: str, one: str, calls: int) -> None:
    pack = build(PackConfig(supervisor_url=sup.url))
    try:
        for what, args in (("all", {}), (f"name={one}", {"name": one})):
            times, text = await measure(pack, args, calls)
            times.sort()
            p90 = times[int(0.9 * (len(times) - 1))]
            print(
                f"{label:<15} {what:<12} median {statistics.median(times):6.2f} ms  "
                f"p90 {p90:6.2f} ms  answer {len(text):5d} chars ≈ {len(text) // 4:4d} tokens"
            )
    finally:
        for close in pack.closers:
            await close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(f"supervisor_status through execute(), {args.calls} calls each")
    with tempfile.TemporaryDirectory(prefix="opsloop-bench-sup-") as tmp:
        for label, programs, one in (
            ("5 processes", small(), "web"),
            ("50 processes", large(), "pool1"),
        ):
            with ManagedSupervisor(Path(tmp) / label.split()[0], programs) as sup:
                asyncio.run(run(sup, label, one, args.calls))
                sample = sup.rpc("supervisor.getAllProcessInfo")
                assert len(sample) == sum(int(p.options.get("numprocs", "1")) for p in programs), (
                    "supervisord did not start every process"
                )


if __name__ == "__main__":
    main()
