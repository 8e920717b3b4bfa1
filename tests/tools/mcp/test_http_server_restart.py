"""A streamable HTTP server killed and started again on the same port (server-everything
in its streamableHttp mode, a real process): a call while it is down is an ``Error:``
naming the server, answered without waiting out any timeout; once it is back the next
call reconnects (a new initialize, a new session) and works, whether or not a call came
while it was down. A server that forgets our session (HTTP 404, as the spec has a server
say it) is reconnected the same way. The connection's clock is ours: the backoff its
failures earn is stepped over, not waited out."""

from __future__ import annotations

import asyncio

import pytest

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tests.tools.mcp.conftest import EverythingHttp, ProxyFactory
from tools.mcp.connection import MAX_BACKOFF_S, McpConnection
from tools.mcp.load import build_tools
from tools.mcp.tool import McpTool
from tools.spec import McpServerSpec

WAIT_S = 30.0  # a bound on every wait; none of them should come near it
CALL_TIMEOUT_S = 4 * WAIT_S  # a call that waited out its timeout would break the bound
CTX = CallContext(job_id="j", call_id="c1")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def connected(url: str, clock: Clock) -> tuple[McpConnection, McpTool]:
    spec = McpServerSpec(name="every", url=url, timeout=CALL_TIMEOUT_S)
    conn = McpConnection(spec, now=clock, connect_timeout=WAIT_S)
    tools = {tool.name: tool for tool in build_tools(spec, await conn.start(), conn)}
    return conn, tools["every_get-sum"]


async def add(tool: McpTool) -> str:
    async with asyncio.timeout(WAIT_S):
        return str(await tool.execute(tool.args_model.model_validate({"a": 20, "b": 22}), CTX))


async def test_a_call_while_it_is_down_fails_and_a_later_one_reconnects(
    everything_http_server: EverythingHttp,
) -> None:
    server, clock = everything_http_server, Clock()
    conn, total = await connected(server.url, clock)
    try:
        assert "42" in await add(total)
        [first] = await server.announced(1)
        await server.kill()
        with pytest.raises(ToolError) as down:
            await add(total)
        assert str(down.value).startswith("mcp server 'every' "), down.value
        await server.start()
        clock.t += MAX_BACKOFF_S  # whatever wait its failures earned is over
        assert "42" in await add(total)
        [second] = await server.announced(1)  # the new process: one initialize, one session
        assert second != first
        assert conn.starts == 2
    finally:
        await conn.aclose()


async def test_restarted_between_calls_the_next_call_reconnects(
    everything_http_server: EverythingHttp,
) -> None:
    server, clock = everything_http_server, Clock()
    conn, total = await connected(server.url, clock)
    try:
        assert "42" in await add(total)
        [first] = await server.announced(1)
        await server.kill()
        async with asyncio.timeout(WAIT_S):
            await conn.ended()  # its event stream broke: noticed without any call
        await server.start()
        # It does not know the old session (server-everything answers it 400, not 404):
        # the next call must not reuse it.
        assert "42" in await add(total)
        [second] = await server.announced(1)
        assert second != first
        assert conn.starts == 2
    finally:
        await conn.aclose()


async def test_a_forgotten_session_is_replaced(
    everything_http: str, recording_proxy: ProxyFactory
) -> None:
    proxy = await recording_proxy(everything_http)
    clock = Clock()
    conn, total = await connected(proxy.url, clock)
    try:
        assert "42" in await add(total)
        old = (await proxy.seen("tools/call")).session
        assert old is not None
        proxy.forgotten.add(old)  # from now on the server answers that session 404
        with pytest.raises(ToolError) as refused:
            await add(total)
        assert str(refused.value).startswith("mcp server 'every' "), refused.value
        assert "42" in await add(total)
        initializes = [seen for seen in proxy.requests if seen.rpc == "initialize"]
        assert len(initializes) == 2 and initializes[1].session is None
        calls = [seen for seen in proxy.requests if seen.rpc == "tools/call"]
        assert calls[-1].session not in (None, old)
        assert conn.starts == 2
    finally:
        await conn.aclose()
