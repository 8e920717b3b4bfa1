"""``notifications/tools/list_changed``: the server's tools are listed again and jobs that
start afterwards see the new listing, while a job already running keeps the tools it
started with (the same objects; the prompt's tools block never changes). A storm of
notifications is one more listing per ``relist_every``; a new name that is invalid or
collides is logged and skipped. The server is a real process on the SDK's
``MCPServer``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tests.tools.mcp.conftest import Connect
from tools.mcp.load import LiveTools
from tools.mcp.tool import McpTool
from tools.registry import Catalog

WAIT_S = 30.0
CHANGING = """
from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("changing")


def extra() -> str:
    \"\"\"A tool that appeared later.\"\"\"
    return "extra"


@app.tool()
async def grow(ctx: Context, name: str, storm: int = 1) -> str:
    \"\"\"Add a tool called ``name``, then say so ``storm`` times.\"\"\"
    app.add_tool(extra, name=name)
    for _ in range(storm):
        await ctx.notify_tools_changed()
    return "grown"


@app.tool()
async def shrink(ctx: Context) -> str:
    \"\"\"Remove ``hello``, then say so.\"\"\"
    app.remove_tool("hello")
    await ctx.notify_tools_changed()
    return "shrunk"


@app.tool()
def hello() -> str:
    \"\"\"Say hello.\"\"\"
    return "hello"


app.run()
"""


TOOLS_YML = """
mcp_servers:
  - name: ch
    command: {command}
tools:
  - name: ch_taken
    description: Taken first.
    run: [echo, hi]
"""


async def start(connect: Connect, tmp_path: Path) -> Catalog:
    script = tmp_path / "changing.py"
    script.write_text(CHANGING)
    return await connect(TOOLS_YML.format(command=json.dumps([sys.executable, str(script)])))


async def test_list_changed_updates_the_catalogue_for_later_jobs(
    connect: Connect, tmp_path: Path
) -> None:
    catalog = await start(connect, tmp_path)
    assert isinstance(catalog.tools, LiveTools)
    mcp = catalog.tools._mcp
    mcp.relist_every = 3600.0  # the storm's second listing is never due in this test
    running_job = catalog.for_channel("C1")  # what a job that already started holds
    assert [t.name for t in running_job] == ["ch_grow", "ch_hello", "ch_shrink", "ch_taken"]
    grow, hello = catalog.tools["ch_grow"], catalog.tools["ch_hello"]
    assert isinstance(grow, McpTool)

    ctx = CallContext(job_id="j", call_id="c1")
    args = grow.args_model.model_validate({"name": "fresh", "storm": 50})
    assert "grown" in str(await grow.execute(args, ctx))
    async with asyncio.timeout(WAIT_S):
        await mcp.relisted.wait()
    assert mcp.relists == 1  # fifty notifications: one listing now, one pending
    later_job = catalog.for_channel("C1")
    assert [t.name for t in later_job] == [
        "ch_fresh",
        "ch_grow",
        "ch_hello",
        "ch_shrink",
        "ch_taken",
    ]
    assert later_job[1] is grow and later_job[2] is hello  # unchanged: the same objects
    assert [t.name for t in running_job] == ["ch_grow", "ch_hello", "ch_shrink", "ch_taken"]
    assert catalog.sources["ch_fresh"] == "mcp:ch"
    fresh = catalog.tools["ch_fresh"]
    out = await fresh.execute(fresh.args_model.model_validate({}), ctx)
    assert "extra" in str(out)


async def test_a_new_name_that_collides_or_is_invalid_is_skipped(
    connect: Connect, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = await start(connect, tmp_path)
    assert isinstance(catalog.tools, LiveTools)
    mcp = catalog.tools._mcp
    mcp.relist_every = 0.0
    grow = catalog.tools["ch_grow"]
    ctx = CallContext(job_id="j", call_id="c1")
    for name, count in (("taken", 1), ("x" * 70, 2)):
        mcp.relisted.clear()
        args = grow.args_model.model_validate({"name": name, "storm": 1})
        assert "grown" in str(await grow.execute(args, ctx))
        async with asyncio.timeout(WAIT_S):
            while mcp.relists < count:
                await mcp.relisted.wait()
                mcp.relisted.clear()
    assert sorted(catalog.tools) == ["ch_grow", "ch_hello", "ch_shrink", "ch_taken"]
    assert catalog.sources["ch_taken"] != "mcp:ch"
    assert "'ch_taken', which is already taken; skipped" in caplog.text
    assert "cannot be offered as" in caplog.text


async def test_a_tool_gone_from_the_listing_stays_for_the_jobs_offered_it(
    connect: Connect, tmp_path: Path
) -> None:
    catalog = await start(connect, tmp_path)
    assert isinstance(catalog.tools, LiveTools)
    mcp = catalog.tools._mcp
    hello, shrink = catalog.tools["ch_hello"], catalog.tools["ch_shrink"]
    ctx = CallContext(job_id="j", call_id="c1")
    assert "shrunk" in str(await shrink.execute(shrink.args_model.model_validate({}), ctx))
    async with asyncio.timeout(WAIT_S):
        await mcp.relisted.wait()
    assert "ch_hello" not in catalog.tools  # later jobs are not offered it
    assert catalog.retired["ch_hello"] is hello
    [kept] = catalog.named(["ch_hello"])  # a job offered it keeps its definition
    assert kept is hello
    with pytest.raises(ToolError, match="mcp server 'ch'"):  # the server says it is gone
        await kept.execute(kept.args_model.model_validate({}), ctx)


async def test_a_change_before_the_server_was_watched_is_not_lost(
    connect: Connect, tmp_path: Path
) -> None:
    """A ``list_changed`` that arrives while other servers are still connecting (before
    start-up watches this one) is remembered and acted on when it is watched."""
    catalog = await start(connect, tmp_path)
    assert isinstance(catalog.tools, LiveTools)
    mcp = catalog.tools._mcp
    [connection] = mcp.connections
    spec = connection.spec
    connection.on_tools_changed = None  # as before ``watch``
    connection._tools_changed()  # what the notification handler does
    assert connection.missed_change and mcp.relists == 0
    mcp.watch(spec, connection)
    async with asyncio.timeout(WAIT_S):
        await mcp.relisted.wait()
    assert mcp.relists == 1 and not connection.missed_change
