"""An entry's ``headers:`` (``${NAME}`` expanded from the bot's environment) go with every
HTTP request to the server: initialize, tools/list, tools/call, the event stream and the
closing DELETE. A recording proxy on loopback in front of server-everything (a real
process) sees them. Their values are credentials: they appear in no log line and in no
error message, not even when the server echoes them back in its error."""

from __future__ import annotations

import logging
import os
import secrets

import pytest
from aiohttp import web

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tests.tools.mcp.conftest import Connect, ProxyFactory, Seen

CTX = CallContext(job_id="j", call_id="c1")
TOOLS_YML = """
mcp_servers:
  - name: every
    url: {url}
    headers: {{Authorization: "Bearer ${{EVERY_TOKEN}}", X-Tenant: "tenant-${{EVERY_TENANT}}"}}
"""


def environ(token: str, tenant: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "EVERY_TOKEN": token, "EVERY_TENANT": tenant}


async def test_headers_go_with_every_request(
    recording_proxy: ProxyFactory,
    everything_http: str,
    connect: Connect,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # the SDK's and httpx2's debug lines too
    token, tenant = f"tok-{secrets.token_hex(12)}", f"t-{secrets.token_hex(6)}"
    proxy = await recording_proxy(everything_http)
    catalog = await connect(TOOLS_YML.format(url=proxy.url), environ=environ(token, tenant))
    tool = catalog.tools["every_get-sum"]
    assert "42" in str(await tool.execute(tool.args_model.model_validate({"a": 20, "b": 22}), CTX))
    await proxy.seen("GET")  # the event stream the SDK opens after initialize
    await catalog.aclose()
    await proxy.seen("DELETE")  # the session ended on close
    kinds = {seen.rpc or seen.method for seen in proxy.requests}
    assert {"initialize", "tools/list", "tools/call", "GET", "DELETE"} <= kinds, kinds
    for seen in proxy.requests:
        assert seen.headers.get("authorization") == f"Bearer {token}", seen
        assert seen.headers.get("x-tenant") == f"tenant-{tenant}", seen
    assert token not in caplog.text and tenant not in caplog.text


async def test_a_server_echoing_them_does_not_put_them_in_an_error_or_a_log(
    recording_proxy: ProxyFactory,
    everything_http: str,
    connect: Connect,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    token, tenant = f"tok-{secrets.token_hex(12)}", f"t-{secrets.token_hex(6)}"
    proxy = await recording_proxy(everything_http)

    async def echo(seen: Seen) -> web.StreamResponse | None:
        if seen.rpc != "tools/call":
            return None
        auth, tenant_seen = seen.headers.get("authorization"), seen.headers.get("x-tenant")
        said = f"denied {auth} (token {token}, {tenant_seen})"
        error = {"code": -32003, "message": said}
        return web.json_response({"jsonrpc": "2.0", "id": None, "error": error}, status=403)

    proxy.answer = echo
    catalog = await connect(TOOLS_YML.format(url=proxy.url), environ=environ(token, tenant))
    tool = catalog.tools["every_get-sum"]
    with pytest.raises(ToolError) as refused:
        await tool.execute(tool.args_model.model_validate({"a": 20, "b": 22}), CTX)
    text = str(refused.value)
    assert text.startswith("mcp server 'every'") and "denied" in text, text
    assert token not in text and tenant not in text, text
    assert token not in caplog.text and tenant not in caplog.text
