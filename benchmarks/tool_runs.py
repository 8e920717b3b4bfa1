"""Tool-call overhead: a tools.yml command tool against a bare subprocess of the same
program, and 50 parallel read-only http tool calls to a local server.

    python benchmarks/tool_runs.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from aiohttp import web

from bot.agent import CallContext
from tools.command import CommandTool
from tools.http import HttpFetcher, HttpTool
from tools.netpolicy import AddressPolicy
from tools.spec import CommandToolSpec, HttpToolSpec

PROGRAM = ["/bin/echo", "ok"]
CTX = CallContext(job_id="C1:1.1:j1", call_id="bench")


async def bare(n: int) -> None:
    for _ in range(n):
        proc = await asyncio.create_subprocess_exec(
            *PROGRAM, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        assert out == b"ok\n"


async def ours(n: int) -> None:
    spec = CommandToolSpec.model_validate(
        {
            "name": "echo",
            "description": "Echo.",
            "params": {"word": {"type": "string", "pattern": "^[a-z]+$", "description": "Word"}},
            "run": ["/bin/echo", "{word}"],
        }
    )
    tool = CommandTool(spec, source="bench", environ={"PATH": "/usr/bin:/bin"})
    for _ in range(n):
        args = tool.args_model.model_validate({"word": "ok"})
        assert (await tool.execute(args, CTX)).strip() == "ok"


def timed(coro_fn, n: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    walls, cpus = [], []
    for _ in range(5):
        w0, c0 = time.perf_counter(), time.process_time()
        asyncio.run(coro_fn(n))
        walls.append((time.perf_counter() - w0) * 1000 / n)
        cpus.append((time.process_time() - c0) * 1000 / n)
    return statistics.median(walls), statistics.median(cpus)


async def http_parallel(calls: int) -> tuple[float, int]:
    hits = 0

    async def handle(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        return web.json_response({"status": "ok", "n": hits})

    app = web.Application()
    app.router.add_get("/status", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fetcher = HttpFetcher(AddressPolicy(["127.0.0.1"]))
    spec = HttpToolSpec.model_validate(
        {
            "name": "status",
            "kind": "http",
            "description": "Status.",
            "parallel": True,
            "request": {"url": f"http://127.0.0.1:{port}/status", "select": "status"},
        }
    )
    tool = HttpTool(spec, source="bench", fetcher=fetcher)
    args = tool.args_model.model_validate({})
    try:
        await asyncio.gather(*(tool.execute(args, CTX) for _ in range(5)))  # warm-up
        w0 = time.perf_counter()
        results = await asyncio.gather(*(tool.execute(args, CTX) for _ in range(calls)))
        wall = (time.perf_counter() - w0) * 1000
        assert all('"ok"' in r for r in results)
    finally:
        await fetcher.aclose()
        await runner.cleanup()
    return wall, hits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    opts = parser.parse_args()
    bare_wall, bare_cpu = timed(bare, opts.calls)
    our_wall, our_cpu = timed(ours, opts.calls)
    print(f"command tool vs bare subprocess ({opts.calls} sequential calls of {PROGRAM})")
    print(f"{'what':<34} {'wall ms/call':>12} {'CPU ms/call':>12}")
    print(f"{'bare create_subprocess_exec':<34} {bare_wall:>12.3f} {bare_cpu:>12.3f}")
    print(f"{'CommandTool (validate+spawn+capture)':<34} {our_wall:>12.3f} {our_cpu:>12.3f}")
    print(
        f"overhead: +{our_wall - bare_wall:.3f} ms wall, +{our_cpu - bare_cpu:.3f} ms CPU per call"
    )
    wall, hits = asyncio.run(http_parallel(50))
    print(
        f"\n50 parallel http tool calls to a local server: {wall:.1f} ms in all ({hits} requests)"
    )


if __name__ == "__main__":
    sys.exit(main())
