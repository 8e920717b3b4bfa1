"""The ``host`` and ``http`` packs' read-only calls: median time to answer, and how
big the answer is for the model (tokens ≈ chars / 4).

``host_cpu`` and ``host_top_processes`` sample for half a second by design, so their
wall time is mostly waiting; the CPU column is what the call costs the bot.
``host_tail_log`` reads a 100,000-line file; ``http_check`` a server on 127.0.0.1.

    python benchmarks/pack_host_http.py [--runs 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.agent import CallContext
from bot.agent.tools import Tool
from tools.packs import PackConfig, load_packs

CTX = CallContext(job_id="C1:1.1:j1", call_id="bench")
LOG_LINES = 100_000


def write_log(folder: Path) -> Path:
    path = folder / "app.log"
    with open(path, "w") as f:
        for i in range(LOG_LINES):
            f.write(
                f"2025-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z INFO  request id={i:06d} "
                f"path=/api/v1/items/{i % 997} status=200 duration_ms={i % 250}\n"
            )
    return path


async def measure(tool: Tool, args: dict[str, Any], runs: int) -> tuple[float, float, int]:
    """Median wall ms, median CPU ms, and the answer's size in chars."""
    walls: list[float] = []
    cpus: list[float] = []
    size = 0
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        result = await tool.execute(tool.args_model.model_validate(args), CTX)
        walls.append((time.perf_counter() - w0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
        size = len(result)
    return statistics.median(walls), statistics.median(cpus), size


async def main_async(runs: int) -> None:
    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version": "1.2.3", "checks": {"db": "ok"}})

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]

    with tempfile.TemporaryDirectory() as folder:
        log = write_log(Path(folder))
        packs = load_packs(["host", "http"], PackConfig(log_dirs=(folder,), http_allow="127.0.0.1"))
        tools = {t.name: t for pack in packs.values() for t in pack.tools}
        cases: list[tuple[str, str, dict[str, Any]]] = [
            ("host_cpu", "", {}),
            ("host_memory", "", {}),
            ("host_disk", "", {}),
            ("host_top_processes", "by=cpu limit=10", {"by": "cpu", "limit": 10}),
            ("host_top_processes", "by=memory limit=10", {"by": "memory", "limit": 10}),
            ("host_tail_log", "100k-line file, 100 lines", {"path": log.name}),
            ("host_tail_log", "100k-line file, 500 lines", {"path": log.name, "lines": 500}),
            ("http_check", "local server, 200", {"url": f"http://127.0.0.1:{port}/health"}),
        ]
        try:
            print(f"host and http packs: median of {runs} calls each")
            print(
                f"{'tool':<20} {'case':<28} {'wall ms':>9} {'CPU ms':>8} {'chars':>6} {'≈tok':>5}"
            )
            for name, label, args in cases:
                wall, cpu, chars = await measure(tools[name], args, runs)
                print(f"{name:<20} {label:<28} {wall:>9.1f} {cpu:>8.1f} {chars:>6} {chars // 4:>5}")
        finally:
            for pack in packs.values():
                for close in pack.closers:
                    await close()
            await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    opts = parser.parse_args()
    asyncio.run(main_async(opts.runs))


if __name__ == "__main__":
    main()
