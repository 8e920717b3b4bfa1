"""A server that was restarted may offer other tools than before: after every reconnect
but the first start, its tools are listed again (through the catalogue's one re-listing
path, as after ``list_changed``) and jobs that start afterwards see the new listing.
The server that changes is a real process on the SDK's ``MCPServer`` that offers ``a``
on its first start and ``a`` and ``b`` on every later one: over stdio it is killed and
the next call starts it again; over streamable HTTP (2026-07-28) it is killed and
started again on its port, and the next call reconnects. server-everything over HTTP
(2025-11-25, a session) is listed again after a reconnect too."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from bot.agent.tools import CallContext
from tests.tools.mcp.conftest import Connect, EverythingHttp, free_port
from tools.mcp.load import LiveTools, McpTools
from tools.mcp.tool import McpTool
from tools.registry import Catalog

WAIT_S = 30.0
CTX = CallContext(job_id="j", call_id="c1")
GROWS = """
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

state = Path(sys.argv[1])
starts = int(state.read_text()) + 1 if state.exists() else 1
state.write_text(str(starts))
Path(sys.argv[2]).write_text(str(os.getpid()))
app = MCPServer("grows")


@app.tool()
def a() -> str:
    \"\"\"The tool it always had.\"\"\"
    return f"a from start {starts}"


if starts > 1:

    @app.tool()
    def b() -> str:
        \"\"\"A tool it offers only after a restart.\"\"\"
        return "b"


if len(sys.argv) > 3:  # streamable HTTP on this port
    app.run("streamable-http", port=int(sys.argv[3]))
else:
    app.run()
"""


def live(catalog: Catalog) -> McpTools:
    assert isinstance(catalog.tools, LiveTools)
    return catalog.tools._mcp


async def relisted(mcp: McpTools, count: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while mcp.relists < count:
            mcp.relisted.clear()
            await mcp.relisted.wait()


async def test_a_restarted_stdio_server_s_new_tool_is_offered(
    connect: Connect, tmp_path: Path
) -> None:
    script, state, pidfile = tmp_path / "grows.py", tmp_path / "starts", tmp_path / "pid"
    script.write_text(GROWS)
    argv = [sys.executable, str(script), str(state), str(pidfile)]
    catalog = await connect(f"mcp_servers: [{{name: gr, command: {json.dumps(argv)}}}]")
    mcp = live(catalog)
    assert [t.name for t in catalog.for_channel("C1")] == ["gr_a"]
    tool = catalog.tools["gr_a"]
    assert isinstance(tool, McpTool)
    assert "start 1" in str(await tool.execute(tool.args_model.model_validate({}), CTX))
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    async with asyncio.timeout(WAIT_S):
        await tool.connection.ended()
        out = await tool.execute(tool.args_model.model_validate({}), CTX)  # starts it again
    assert "start 2" in str(out) and tool.connection.starts == 2
    await relisted(mcp, 1)
    assert [t.name for t in catalog.for_channel("C1")] == ["gr_a", "gr_b"]
    assert catalog.tools["gr_a"] is tool  # unchanged: the same object
    b = catalog.tools["gr_b"]
    assert "b" in str(await b.execute(b.args_model.model_validate({}), CTX))
    assert mcp.relists == 1  # the first start was listed by start-up alone


async def test_a_reconnected_http_server_is_listed_again(
    everything_http_server: EverythingHttp, connect: Connect
) -> None:
    server = everything_http_server
    catalog = await connect(f"mcp_servers: [{{name: every, url: '{server.url}'}}]")
    mcp = live(catalog)
    tool = catalog.tools["every_echo"]
    assert isinstance(tool, McpTool)
    args = tool.args_model.model_validate({"message": "again"})
    assert "again" in str(await tool.execute(args, CTX))
    await server.kill()
    async with asyncio.timeout(WAIT_S):
        await tool.connection.ended()
    await server.start()
    async with asyncio.timeout(WAIT_S):
        assert "again" in str(await tool.execute(args, CTX))
    assert tool.connection.starts == 2
    await relisted(mcp, 1)
    assert mcp.relists == 1 and catalog.tools["every_echo"] is tool


class GrowsOverHttp:
    """``GROWS`` on the SDK's streamable HTTP (protocol 2026-07-28) on one port."""

    def __init__(self, tmp_path: Path) -> None:
        script = tmp_path / "grows.py"
        script.write_text(GROWS)
        port = free_port()
        self.argv = [sys.executable, str(script), str(tmp_path / "starts"), os.devnull, str(port)]
        self.url = f"http://127.0.0.1:{port}/mcp"
        self._proc: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[bytes] | None = None

    async def start(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._proc = proc
        assert proc.stderr is not None
        async with asyncio.timeout(WAIT_S):
            while b"Uvicorn running" not in (line := await proc.stderr.readline()):
                assert line, "the server exited"
        self._drain = asyncio.create_task(proc.stderr.read())

    async def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            async with asyncio.timeout(WAIT_S):
                await proc.wait()
                if self._drain is not None:
                    await self._drain


async def test_a_restarted_http_server_s_new_tool_is_offered(
    tmp_path: Path, connect: Connect
) -> None:
    server = GrowsOverHttp(tmp_path)
    await server.start()
    try:
        catalog = await connect(f"mcp_servers: [{{name: gr, url: '{server.url}'}}]")
        mcp = live(catalog)
        assert [t.name for t in catalog.for_channel("C1")] == ["gr_a"]
        tool = catalog.tools["gr_a"]
        assert isinstance(tool, McpTool)
        assert "start 1" in str(await tool.execute(tool.args_model.model_validate({}), CTX))
        await server.kill()
        async with asyncio.timeout(WAIT_S):
            await tool.connection.ended()  # its tool change subscription broke off
        await server.start()
        async with asyncio.timeout(WAIT_S):
            out = await tool.execute(tool.args_model.model_validate({}), CTX)
        assert "start 2" in str(out) and tool.connection.starts == 2
        await relisted(mcp, 1)
        assert [t.name for t in catalog.for_channel("C1")] == ["gr_a", "gr_b"]
        await catalog.aclose()
    finally:
        await server.kill()
