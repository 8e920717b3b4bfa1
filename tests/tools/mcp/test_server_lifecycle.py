"""A server's lifetime is the catalogue's: started at connect, stopped (its process
and any helper it started in its group gone) by ``aclose``; a call that hangs is cut
by the tool's timeout, names the server, and leaves the connection usable."""

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
from tools.registry import build_catalog, connect_mcp

WAIT_S = 30.0
# A server that starts a helper and exits cleanly when its stdin closes: the helper would
# be orphaned if only the server were stopped.
WITH_HELPER = """
import subprocess, sys
from mcp.server.mcpserver import MCPServer

helper = subprocess.Popen(["sleep", "1000"])
open(sys.argv[1], "w").write(str(helper.pid))
app = MCPServer("helper")


@app.tool()
def hello() -> str:
    \"\"\"Say hello.\"\"\"
    return "hello"


app.run()
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: only its entry in the process table remains.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"


async def test_aclose_stops_the_server_process(
    tmp_path: Path, everything_server: list[str]
) -> None:
    pidfile = tmp_path / "pid"
    wrapper = ["sh", "-c", f'echo $$ > {pidfile}; exec "$0"', everything_server[0]]
    path = tmp_path / "tools.yml"
    path.write_text(f"mcp_servers: [{{name: every, command: {json.dumps(wrapper)}}}]\n")
    catalog = await connect_mcp(build_catalog(tools_file=path))
    pid = int(pidfile.read_text())
    assert alive(pid)
    assert os.getpgid(pid) == pid  # its own process group (a new session)
    async with asyncio.timeout(WAIT_S):
        await catalog.aclose()
    assert not alive(pid)
    tool = catalog.tools["every_echo"]
    with pytest.raises(ToolError, match="^mcp server 'every' is closed"):
        await tool.execute(
            tool.args_model.model_validate({"message": "x"}), CallContext(job_id="j", call_id="c")
        )


async def test_a_hung_call_is_cut_and_the_server_stays_usable(
    connect: Connect, everything_server: list[str]
) -> None:
    catalog = await connect(
        f"""
        mcp_servers:
          - name: every
            command: {json.dumps(everything_server)}
            tools: {{trigger-long-running-operation: {{timeout: 1}}}}
        """
    )
    slow = catalog.tools["every_trigger-long-running-operation"]
    assert slow.timeout > 1  # the common path's own limit is a backstop behind ours
    ctx = CallContext(job_id="j", call_id="c1")
    with pytest.raises(ToolError, match=r"^mcp server 'every' did not answer within 1s"):
        async with asyncio.timeout(WAIT_S):
            await slow.execute(slow.args_model.model_validate({"duration": 30, "steps": 3}), ctx)
    echo = catalog.tools["every_echo"]
    out = await echo.execute(echo.args_model.model_validate({"message": "still here"}), ctx)
    assert "still here" in str(out)


async def exited(pid: int) -> None:
    """Until ``pid`` (not our child) has exited: its pidfd becomes readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    gone = asyncio.Event()
    loop.add_reader(fd, gone.set)
    try:
        await gone.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def test_helpers_of_a_server_are_stopped_too(tmp_path: Path) -> None:
    script = tmp_path / "with_helper.py"
    script.write_text(WITH_HELPER)
    pidfile = tmp_path / "helper.pid"
    argv = json.dumps([sys.executable, str(script), str(pidfile)])
    path = tmp_path / "tools.yml"
    path.write_text(f"mcp_servers: [{{name: helper, command: {argv}}}]\n")
    catalog = await connect_mcp(build_catalog(tools_file=path))
    helper = int(pidfile.read_text())
    assert alive(helper)
    async with asyncio.timeout(WAIT_S):
        await catalog.aclose()
        await exited(helper)
    assert not alive(helper)
