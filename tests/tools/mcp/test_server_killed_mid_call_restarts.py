"""A stdio server killed in the middle of a call: that call is an ``Error:`` naming the
server, the next call starts it again and works, and the other server's tools never
notice. Killed between calls, the next call simply works."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tests.tools.mcp.conftest import Connect
from tools.mcp.tool import McpTool

WAIT_S = 30.0


async def test_killed_mid_call_then_restarted(
    connect: Connect, everything_server: list[str], time_server: list[str], tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    # ``exec`` keeps the pid: the file names the server process itself.
    wrapper = ["sh", "-c", f'echo $$ > {pidfile}; exec "$0"', everything_server[0]]
    catalog = await connect(
        f"""
        mcp_servers:
          - name: every
            command: {json.dumps(wrapper)}
          - name: time
            command: {json.dumps(time_server)}
        """
    )
    slow = catalog.tools["every_trigger-long-running-operation"]
    total = catalog.tools["every_get-sum"]
    clock = catalog.tools["time_get_current_time"]
    assert isinstance(slow, McpTool)
    first_pid = int(pidfile.read_text())
    started = asyncio.Event()
    ctx = CallContext(job_id="j", call_id="c1", progress=lambda _: started.set())
    args = slow.args_model.model_validate({"duration": 60, "steps": 60})
    call = asyncio.create_task(slow.execute(args, ctx))
    async with asyncio.timeout(WAIT_S):
        await started.wait()  # the server reported progress: the call is in flight
    os.kill(first_pid, signal.SIGKILL)
    async with asyncio.timeout(WAIT_S):
        try:
            await call
            raise AssertionError("the call of a killed server returned")
        except ToolError as exc:
            assert str(exc).startswith("mcp server 'every' "), exc
    # The other server is unaffected.
    now = await clock.execute(
        clock.args_model.model_validate({"timezone": "UTC"}), CallContext(job_id="j", call_id="c2")
    )
    assert "UTC" in str(now)
    # The next call starts the server again.
    async with asyncio.timeout(WAIT_S):
        out = await total.execute(
            total.args_model.model_validate({"a": 2, "b": 3}), CallContext(job_id="j", call_id="c3")
        )
    assert "5" in str(out)
    assert int(pidfile.read_text()) != first_pid
    assert slow.connection.starts == 2


async def test_killed_between_calls_the_next_call_works(
    connect: Connect, everything_server: list[str], tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    wrapper = ["sh", "-c", f'echo $$ > {pidfile}; exec "$0"', everything_server[0]]
    catalog = await connect(f"mcp_servers: [{{name: every, command: {json.dumps(wrapper)}}}]")
    tool = catalog.tools["every_echo"]
    assert isinstance(tool, McpTool)
    args = tool.args_model.model_validate({"message": "again"})
    ctx = CallContext(job_id="j", call_id="c1")
    assert "again" in str(await tool.execute(args, ctx))
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    async with asyncio.timeout(WAIT_S):
        await tool.connection.ended()  # the exit was noticed without any call
        assert "again" in str(await tool.execute(args, ctx))
    assert tool.connection.starts == 2
