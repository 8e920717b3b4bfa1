"""A call given up on (Stop, the deadline, its own timeout) is cancelled on the server
(``notifications/cancelled``); a server that then does not answer a request within the
grace — still stuck in the abandoned work — is stopped with its process group, and the
next call starts it again. A server that honours the cancel keeps running."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tests.tools.mcp.conftest import Connect
from tools.mcp.tool import McpTool

WAIT_S = 30.0
SERVER = '''
import asyncio, os, sys, time
from mcp.server.mcpserver import MCPServer

app = MCPServer("stuck")
log = sys.argv[1]


def note(what):
    with open(log, "a") as f:
        f.write(f"{what} {os.getpid()}\\n")


@app.tool()
async def stuck() -> str:
    """Block the whole server (a handler that never yields)."""
    note("stuck")
    time.sleep(600)
    return "never"


@app.tool()
async def polite() -> str:
    """Wait, and stop when cancelled."""
    note("polite")
    await asyncio.sleep(600)
    return "never"


@app.tool()
def whoami() -> str:
    """This server's pid."""
    return str(os.getpid())


app.run()
'''


async def noted(log: Path, what: str) -> int:
    """The pid that wrote ``what`` to ``log`` (waits for it, bounded)."""
    for _ in range(int(WAIT_S / 0.05)):
        text = await asyncio.to_thread(lambda: log.read_text() if log.exists() else "")
        if text:
            for line in text.splitlines():
                word, pid = line.split()
                if word == what:
                    return int(pid)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the server never noted {what!r}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int) -> bool:
    for _ in range(int(WAIT_S / 0.05)):
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def catalogue(connect: Connect, tmp_path: Path) -> tuple[dict[str, McpTool], Path]:
    script, log = tmp_path / "stuck.py", tmp_path / "calls.log"
    script.write_text(SERVER)
    argv = json.dumps([sys.executable, str(script), str(log)])
    catalog = await connect(f"mcp_servers: [{{name: st, command: {argv}, timeout: 60}}]")
    tools = {n: t for n, t in catalog.tools.items() if isinstance(t, McpTool)}
    tools["st_stuck"].connection.stop_grace = 1.0
    return tools, log


async def whoami(tool: McpTool) -> int:
    ctx = CallContext(job_id="j", call_id="c9")
    return int(str(await tool.execute(tool.args_model.model_validate({}), ctx)))


@pytest.mark.parametrize("abandon", ["cancel", "timeout"])
async def test_a_server_stuck_in_a_cancelled_call_is_stopped_and_started_again(
    connect: Connect, tmp_path: Path, abandon: str
) -> None:
    tools, log = await catalogue(connect, tmp_path)
    first = await whoami(tools["st_whoami"])
    stuck = tools["st_stuck"]
    ctx = CallContext(job_id="j", call_id="c1")
    args = stuck.args_model.model_validate({})
    if abandon == "cancel":  # Stop or the job's deadline cancel the call's task
        call = asyncio.create_task(stuck.execute(args, ctx))
        assert await noted(log, "stuck") == first
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    else:  # the call's own timeout
        stuck.connection.stop_grace = 1.0
        with pytest.raises(ToolError, match="did not answer within"):
            await stuck.connection.call("stuck", {}, time_limit=1.0)
        assert await noted(log, "stuck") == first

    assert await gone(first), "the stuck server was left running"
    again = await whoami(tools["st_whoami"])  # the next call starts it again
    assert again != first and alive(again)
    assert stuck.connection.starts == 2


async def test_a_server_that_honours_the_cancel_keeps_running(
    connect: Connect, tmp_path: Path
) -> None:
    tools, log = await catalogue(connect, tmp_path)
    polite = tools["st_polite"]
    call = asyncio.create_task(
        polite.execute(polite.args_model.model_validate({}), CallContext(job_id="j", call_id="c1"))
    )
    pid = await noted(log, "polite")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.sleep(2.0)  # past the 1 s grace: the probe was answered, nothing stopped
    assert alive(pid)
    assert await whoami(tools["st_whoami"]) == pid
    assert polite.connection.starts == 1
