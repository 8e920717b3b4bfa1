"""The stream a server's tool changes arrive on (at 2026-07-28 over streamable HTTP, a
``subscriptions/listen`` answer) is quiet for as long as nothing changes: a quiet spell
longer than the entry's ``timeout`` does not end it, and a change after it is still
heard and listed. The server is a real process on the SDK's ``MCPServer``; the quiet
spell is real time (three times the entry's timeout), since it is what is tested."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.agent.tools import CallContext
from tests.tools.mcp.conftest import Connect, free_port
from tools.mcp.load import LiveTools

WAIT_S = 30.0
TIMEOUT_S = 1.0  # the entry's timeout: each request's read timeout unless exempted
QUIET_S = 3 * TIMEOUT_S
CHANGING = """
import sys

from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("changing")


def extra() -> str:
    \"\"\"A tool that appeared later.\"\"\"
    return "extra"


@app.tool()
async def grow(ctx: Context) -> str:
    \"\"\"Add the tool fresh, then say so.\"\"\"
    app.add_tool(extra, name="fresh")
    await ctx.notify_tools_changed()
    return "grown"


app.run("streamable-http", port=int(sys.argv[1]))
"""


@pytest.fixture
async def changing_http(tmp_path: Path) -> AsyncIterator[str]:
    script = tmp_path / "changing.py"
    script.write_text(CHANGING)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        str(port),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    stderr = proc.stderr
    drain: asyncio.Task[bytes] | None = None
    try:
        async with asyncio.timeout(WAIT_S):
            while b"Uvicorn running" not in (line := await stderr.readline()):
                assert line, "the server exited"
        drain = asyncio.create_task(stderr.read())  # keep its pipe from filling
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        async with asyncio.timeout(WAIT_S):
            await proc.wait()
            if drain is not None:
                await drain


async def test_a_change_after_a_quiet_spell_is_listed(changing_http: str, connect: Connect) -> None:
    catalog = await connect(
        f"mcp_servers: [{{name: ch, url: '{changing_http}', timeout: {TIMEOUT_S}}}]"
    )
    assert isinstance(catalog.tools, LiveTools)
    mcp = catalog.tools._mcp
    assert sorted(catalog.tools) == ["ch_grow"]
    await asyncio.sleep(QUIET_S)  # the scenario itself: nothing happens for a while
    grow = catalog.tools["ch_grow"]
    ctx = CallContext(job_id="j", call_id="c1")
    assert "grown" in str(await grow.execute(grow.args_model.model_validate({}), ctx))
    async with asyncio.timeout(WAIT_S):
        await mcp.relisted.wait()
    assert sorted(catalog.tools) == ["ch_fresh", "ch_grow"]
    assert grow.connection.starts == 1  # heard on the same connection, not a reconnect
