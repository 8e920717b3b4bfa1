"""A stdio server that connects and then dies on every call: the first crash is
restarted by the next call, each further crash soon after a start waits its backoff
step (1, 2, 4 … s), calls in between are answered at once without starting anything,
and a connection that lived long enough resets the count. The server is a real process
on the SDK's ``MCPServer``; the connection's clock is ours."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.errors import ToolError
from tools.mcp.connection import HEALTHY_S, McpConnection
from tools.spec import McpServerSpec

CRASHER = """
import os
from mcp.server.mcpserver import MCPServer

app = MCPServer("crasher")


@app.tool()
def crash() -> str:
    \"\"\"Die.\"\"\"
    os._exit(3)


@app.tool()
def hello() -> str:
    \"\"\"Say hello.\"\"\"
    return "hello"


app.run()
"""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def test_a_crash_loop_costs_one_restart_per_backoff_step(tmp_path: Path) -> None:
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    clock = Clock()
    spec = McpServerSpec(name="crashy", command=[sys.executable, str(script)], timeout=30)
    conn = McpConnection(spec, now=clock, connect_timeout=30)

    async def crash() -> str:
        with pytest.raises(ToolError) as caught:
            await conn.call("crash", {}, time_limit=30)
        return str(caught.value)

    try:
        assert sorted(t.name for t in await conn.start()) == ["crash", "hello"]
        assert conn.starts == 1
        assert (await crash()).startswith("mcp server 'crashy' ")
        # The first crash: the next call restarts it at once.
        assert (await crash()).startswith("mcp server 'crashy' ")
        assert conn.starts == 2
        # Crashed again soon after starting: one second before the next attempt.
        refused = await crash()
        assert refused.startswith("mcp server 'crashy' is restarting after repeated failures")
        assert refused.endswith("next attempt in 1s"), refused
        assert conn.starts == 2
        clock.t += 1
        await crash()  # restarted once, crashed
        assert conn.starts == 3
        clock.t += 1
        assert (await crash()).endswith("next attempt in 1s")  # the step is now 2 s
        clock.t += 1
        await crash()
        assert conn.starts == 4
        clock.t += 3
        assert (await crash()).endswith("next attempt in 1s")  # 4 s
        clock.t += 1
        # A connection that lives long enough resets the count.
        result = await conn.call("hello", {}, time_limit=30)
        assert conn.starts == 5 and "hello" in str(result.content)
        clock.t += HEALTHY_S
        await crash()  # ended after a healthy life: restarted at once
        result = await conn.call("hello", {}, time_limit=30)
        assert conn.starts == 6 and "hello" in str(result.content)
        await crash()  # the first short-lived end again: at once
        await conn.call("hello", {}, time_limit=30)
        assert conn.starts == 7
        await crash()  # the second in a row: back to the first step
        assert (await crash()).endswith("next attempt in 1s")
        assert conn.starts == 7
    finally:
        await conn.aclose()
