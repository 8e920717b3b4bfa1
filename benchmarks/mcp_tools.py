"""MCP tool overhead: a trivial stdio MCP tool through ``Tool.execute`` against the same
call through the SDK's own ``Client`` (our overhead on top of the SDK) and against a
command tool doing the same work (a process per call); then the first connect (spawn +
initialize + tools/list) of each reference server, ours against the SDK's.

    python benchmarks/mcp_tools.py [--calls 200] [--connects 5]

Times are per call (median and p95 after a warm-up): wall ms, and CPU ms of this process
only (``time.process_time``; the server's or the child's CPU is not in it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from bot.agent import CallContext
from tools.command import CommandTool
from tools.mcp.connection import McpConnection
from tools.registry import build_catalog, connect_mcp
from tools.spec import CommandToolSpec, McpServerSpec

ROOT = Path(__file__).resolve().parents[1]
NPM_BIN = ROOT / ".opsloop" / "npm" / "node_modules" / ".bin"
CTX = CallContext(job_id="C1:1.1:j1", call_id="bench")
WARM_UP = 20
WORD = "ok"

# The trivial server: one tool that returns its argument. Quiet (WARNING) so that its
# stderr is not a per-request cost of either client.
ECHO_SERVER = """
from mcp.server.mcpserver import MCPServer

app = MCPServer("echo", log_level="WARNING")


@app.tool()
def echo(text: str) -> str:
    \"\"\"Return the text.\"\"\"
    return text


app.run()
"""
# What the command tool runs: a trivial python process printing the same text.
ECHO_PROGRAM = [sys.executable, "-c", "import sys; print(sys.argv[1])"]

Call = Callable[[], Awaitable[None]]


def ms(seconds: float) -> float:
    return seconds * 1000


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


async def per_call(call: Call, n: int) -> tuple[list[float], list[float]]:
    """Wall and CPU ms of each of ``n`` calls, after ``WARM_UP`` calls not counted."""
    for _ in range(WARM_UP):
        await call()
    walls, cpus = [], []
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.process_time()
        await call()
        walls.append(ms(time.perf_counter() - w0))
        cpus.append(ms(time.process_time() - c0))
    return walls, cpus


# -- (a) per call -------------------------------------------------------------------


async def sdk_calls(server: Path, n: int, errlog: TextIO) -> tuple[list[float], list[float]]:
    """The baseline: ``Client.call_tool`` of the SDK on its own stdio transport."""
    params = StdioServerParameters(command=sys.executable, args=[str(server)])
    transport = stdio_client(params, errlog=errlog)
    async with Client(transport, mode="auto", cache=None) as client:

        async def call() -> None:
            result = await client.call_tool("echo", {"text": WORD})
            assert result.content[0].text == WORD  # type: ignore[union-attr]

        return await per_call(call, n)


async def our_mcp_calls(tools_file: Path, n: int) -> tuple[list[float], list[float]]:
    """``McpTool.execute`` (validate + tools/call + result as text) on our connection."""
    catalog = await connect_mcp(build_catalog(tools_file=tools_file))
    try:
        tool = catalog.tools["bench_echo"]

        async def call() -> None:
            args = tool.args_model.model_validate({"text": WORD})
            assert await tool.execute(args, CTX) == WORD

        return await per_call(call, n)
    finally:
        await catalog.aclose()


async def bare_process_calls(n: int) -> tuple[list[float], list[float]]:
    async def call() -> None:
        proc = await asyncio.create_subprocess_exec(
            *ECHO_PROGRAM, WORD, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        assert out == b"ok\n"

    return await per_call(call, n)


async def command_calls(n: int) -> tuple[list[float], list[float]]:
    spec = CommandToolSpec.model_validate(
        {
            "name": "echo",
            "description": "Echo.",
            "params": {"word": {"type": "string", "pattern": "^[a-z]+$", "description": "Word"}},
            "run": [*ECHO_PROGRAM, "{word}"],
        }
    )
    tool = CommandTool(spec, source="bench", environ={"PATH": "/usr/bin:/bin"})

    async def call() -> None:
        args = tool.args_model.model_validate({"word": WORD})
        assert (await tool.execute(args, CTX)).strip() == WORD

    return await per_call(call, n)


# -- (b) first connect --------------------------------------------------------------


async def our_connect(name: str, argv: list[str]) -> tuple[float, float, float, int]:
    """Wall ms and CPU ms of ``McpConnection.start`` (spawn + initialize + tools/list),
    wall ms of its ``aclose``, and the number of tools listed."""
    spec = McpServerSpec.model_validate({"name": name, "command": argv})
    connection = McpConnection(spec)
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        tools = await connection.start()
        wall, cpu = ms(time.perf_counter() - w0), ms(time.process_time() - c0)
    finally:
        s0 = time.perf_counter()
        await connection.aclose()
        close = ms(time.perf_counter() - s0)
    return wall, cpu, close, len(tools)


async def sdk_connect(argv: list[str], errlog: TextIO) -> tuple[float, float]:
    """The same through the SDK's ``Client`` and ``stdio_client``: wall and CPU ms."""
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    w0, c0 = time.perf_counter(), time.process_time()
    async with Client(stdio_client(params, errlog=errlog), mode="auto", cache=None) as client:
        await client.list_tools()
        wall, cpu = ms(time.perf_counter() - w0), ms(time.process_time() - c0)
    return wall, cpu


def time_server() -> list[str]:
    # The installed entry point itself, not a pyenv shim in front of it.
    beside = Path(sys.executable).parent / "mcp-server-time"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("mcp-server-time")
    return [found] if found else [sys.executable, "-m", "mcp_server_time"]


@contextlib.asynccontextmanager
async def quiet() -> AsyncIterator[None]:
    """Our connection logs a server's stderr at INFO; keep it off the table."""
    logger = logging.getLogger("tools.mcp")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


async def connects(servers: dict[str, list[str]], k: int, errlog: TextIO) -> list[tuple[Any, ...]]:
    rows = []
    async with quiet():
        for name, argv in servers.items():
            ours, sdk = [], []
            for _ in range(k):  # alternate, so drift hits both alike
                ours.append(await our_connect("bench", argv))
                sdk.append(await sdk_connect(argv, errlog))
            rows.append(
                (
                    name,
                    ours[0][3],
                    statistics.median(r[0] for r in ours),
                    statistics.median(r[1] for r in ours),
                    statistics.median(r[0] for r in sdk),
                    statistics.median(r[1] for r in sdk),
                    statistics.median(r[2] for r in ours),
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--connects", type=int, default=5)
    opts = parser.parse_args()
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="opsloop-bench-mcp-") as tmp,
        open(os.devnull, "w") as devnull,  # the servers' stderr, for the SDK's client
    ):
        server = Path(tmp) / "echo_server.py"
        server.write_text(ECHO_SERVER)
        tools_file = Path(tmp) / "tools.yml"
        tools_file.write_text(
            f"mcp_servers: [{{name: bench, command: [{sys.executable}, {server}]}}]\n"
        )
        rows = [
            (
                "SDK Client.call_tool (baseline)",
                asyncio.run(sdk_calls(server, opts.calls, devnull)),
            ),
            ("McpTool.execute (ours)", asyncio.run(our_mcp_calls(tools_file, opts.calls))),
            ("bare subprocess python -c", asyncio.run(bare_process_calls(opts.calls))),
            ("CommandTool.execute python -c", asyncio.run(command_calls(opts.calls))),
        ]
        print(
            f"(a) per call: a tool returning its argument, {opts.calls} sequential calls "
            f"after {WARM_UP} warm-up (CPU = this process only)"
        )
        print(f"{'what':<32} {'wall med':>9} {'wall p95':>9} {'CPU med':>8} {'CPU p95':>8}   (ms)")
        medians = {}
        for label, (walls, cpus) in rows:
            medians[label] = (statistics.median(walls), statistics.median(cpus))
            print(
                f"{label:<32} {medians[label][0]:>9.3f} {p95(walls):>9.3f} "
                f"{medians[label][1]:>8.3f} {p95(cpus):>8.3f}"
            )
        sdk, ours = medians[rows[0][0]], medians[rows[1][0]]
        cmd = medians[rows[3][0]]
        print(
            f"ours over the SDK: {ours[0] - sdk[0]:+.3f} ms wall, {ours[1] - sdk[1]:+.3f} ms "
            f"CPU per call; the command tool takes {cmd[0] / ours[0]:.1f}x the wall and "
            f"{cmd[1] / ours[1]:.1f}x the CPU of the MCP tool"
        )

        root = Path(tmp) / "root"
        root.mkdir()
        servers = {"trivial echo (python)": [sys.executable, str(server)]}
        servers["mcp-server-time"] = time_server()
        for name, extra in (("mcp-server-everything", []), ("mcp-server-filesystem", [str(root)])):
            binary = NPM_BIN / name
            if binary.exists():
                servers[name] = [str(binary), *extra]
            else:
                print(f"({binary} is absent: scripts/mcp-test-servers installs it)")
        table = asyncio.run(connects(servers, opts.connects, devnull))
        print(
            f"\n(b) first connect (spawn + initialize + tools/list), median of "
            f"{opts.connects} each; close = our aclose (stdin closed, group stopped)"
        )
        print(
            f"{'server':<24} {'tools':>5} {'ours wall':>10} {'ours CPU':>9} "
            f"{'SDK wall':>9} {'SDK CPU':>8} {'close':>7}   (ms)"
        )
        for name, count, wall, cpu, sdk_wall, sdk_cpu, close in table:
            print(
                f"{name:<24} {count:>5} {wall:>10.1f} {cpu:>9.1f} "
                f"{sdk_wall:>9.1f} {sdk_cpu:>8.1f} {close:>7.1f}"
            )
    print(f"\ntotal {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
