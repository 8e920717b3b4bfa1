"""Stop and the deadline cancel the task of an in-flight call (``bot.agent.guard``);
the server is told (``notifications/cancelled``) and stops working on it."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from bot.agent.tools import CallContext
from tests.tools.mcp.conftest import Connect

WAIT_S = 30.0
SLOW = '''
import asyncio
from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("slow")
cancelled = asyncio.Event()


@app.tool()
async def wait_forever(ctx: Context) -> str:
    """Wait until cancelled."""
    try:
        await ctx.report_progress(1, 2, "started")
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        cancelled.set()
        raise
    return "woke up"


@app.tool()
async def saw_cancel() -> str:
    """Whether wait_forever was cancelled (waits for it a while)."""
    try:
        await asyncio.wait_for(cancelled.wait(), 20)
    except TimeoutError:
        return "not cancelled"
    return "cancelled"


app.run()
'''


async def test_cancelling_the_call_cancels_it_on_the_server(
    connect: Connect, tmp_path: Path
) -> None:
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    argv = json.dumps([sys.executable, str(script)])
    catalog = await connect(f"mcp_servers: [{{name: slow, command: {argv}}}]")
    slow, probe = catalog.tools["slow_wait_forever"], catalog.tools["slow_saw_cancel"]
    started = asyncio.Event()
    ctx = CallContext(job_id="j", call_id="c1", progress=lambda _: started.set())
    call = asyncio.create_task(slow.execute(slow.args_model.model_validate({}), ctx))
    async with asyncio.timeout(WAIT_S):
        await started.wait()
    call.cancel()
    async with asyncio.timeout(WAIT_S):
        await asyncio.wait({call})
        assert call.cancelled()
        answer = await probe.execute(
            probe.args_model.model_validate({}), CallContext(job_id="j", call_id="c2")
        )
    assert answer == "cancelled"
