"""A server on a protocol older than 2026-07-28 has no ``subscriptions/listen``: it sends
``notifications/tools/list_changed`` unasked, on the session (stdio: a line on its
stdout; streamable HTTP: an event on the stream the client opens with GET after
initialize). That too makes the catalogue list its tools again, and the new tool is
offered to jobs that start afterwards.

The servers are small test doubles pinned to one older version each (the SDK's own
server always offers 2026-07-28): a stdio process and an HTTP server on loopback that
answer ``server/discover`` "method not found", as a 2025 server does, agree on the
version in ``initialize``, and on ``grow`` add a tool, answer, and then announce it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.agent.tools import CallContext
from tests.tools.mcp.conftest import Connect, free_port
from tools.mcp.load import LiveTools, McpTools
from tools.registry import Catalog

WAIT_S = 30.0
OLDER = ["2025-06-18", "2025-11-25"]
CTX = CallContext(job_id="j", call_id="c1")
GROW = {
    "name": "grow",
    "description": "Add the tool fresh, then say that the tools changed.",
    "inputSchema": {"type": "object", "properties": {}},
}
FRESH = {
    "name": "fresh",
    "description": "A tool that appeared later.",
    "inputSchema": {"type": "object", "properties": {}},
}
LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}

STDIO_SERVER = """
import json
import sys

version, seen = sys.argv[1], open(sys.argv[2], "a")
tools = [json.loads(sys.argv[3])]
fresh = json.loads(sys.argv[4])


def send(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    seen.write(f"{method}\\n")
    seen.flush()
    if ident is None:
        continue  # notifications/initialized
    if method == "initialize":
        result = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "older", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": tools}
    elif method == "tools/call" and message["params"]["name"] == "grow":
        tools.append(fresh)
        result = {"content": [{"type": "text", "text": "grown"}]}
    else:
        error = {"code": -32601, "message": "Method not found"}
        send({"jsonrpc": "2.0", "id": ident, "error": error})
        continue
    send({"jsonrpc": "2.0", "id": ident, "result": result})
    if method == "tools/call":
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
"""


class OlderHttpServer:
    """A streamable HTTP server of a 2025 protocol version with one session: JSON
    answers to POSTs, and the GET stream for what it sends unasked."""

    SESSION = "older-session-1"

    def __init__(self, version: str) -> None:
        self.version = version
        self.methods: list[str] = []
        self.tools: list[dict[str, Any]] = [GROW]
        self.streaming = asyncio.Event()  # the client's GET stream is open
        self._unasked: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/mcp", self._post)
        app.router.add_get("/mcp", self._get)
        app.router.add_delete("/mcp", self._delete)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/mcp"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _known(self, request: web.Request) -> bool:
        return request.headers.get("Mcp-Session-Id") == self.SESSION

    async def _post(self, request: web.Request) -> web.StreamResponse:
        message = await request.json()
        method, ident = message.get("method"), message.get("id")
        self.methods.append(str(method))
        if method != "initialize" and not self._known(request):
            return web.json_response({"error": "no such session"}, status=404)
        if ident is None:
            return web.Response(status=202)
        headers: dict[str, str] = {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": self.version,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "older-http", "version": "1"},
            }
            headers["Mcp-Session-Id"] = self.SESSION
        elif method == "tools/list":
            result = {"tools": self.tools}
        elif method == "tools/call" and message["params"]["name"] == "grow":
            self.tools = [*self.tools, FRESH]
            self._unasked.put_nowait(LIST_CHANGED)  # not on this request's answer
            result = {"content": [{"type": "text", "text": "grown"}]}
        else:
            error = {"code": -32601, "message": "Method not found"}
            return web.json_response({"jsonrpc": "2.0", "id": ident, "error": error})
        answer = {"jsonrpc": "2.0", "id": ident, "result": result}
        return web.json_response(answer, headers=headers)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        self.methods.append("GET")
        if not self._known(request):
            return web.Response(status=404)
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        self.streaming.set()
        while True:
            message = await self._unasked.get()
            await stream.write(f"event: message\ndata: {json.dumps(message)}\n\n".encode())

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        self.methods.append("DELETE")
        return web.Response(status=200 if self._known(request) else 404)


@pytest.fixture(params=OLDER)
async def older_http(request: pytest.FixtureRequest) -> AsyncIterator[OlderHttpServer]:
    server = OlderHttpServer(request.param)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def live(catalog: Catalog) -> McpTools:
    assert isinstance(catalog.tools, LiveTools)
    return catalog.tools._mcp


async def grow_and_see_fresh(catalog: Catalog) -> None:
    mcp = live(catalog)
    assert [t.name for t in catalog.for_channel("C1")] == ["old_grow"]
    grow = catalog.tools["old_grow"]
    assert "grown" in str(await grow.execute(grow.args_model.model_validate({}), CTX))
    async with asyncio.timeout(WAIT_S):
        await mcp.relisted.wait()
    assert [t.name for t in catalog.for_channel("C1")] == ["old_fresh", "old_grow"]
    assert catalog.tools["old_grow"] is grow


@pytest.mark.parametrize("version", OLDER)
async def test_stdio_list_changed_unasked(connect: Connect, tmp_path: Path, version: str) -> None:
    script, seen = tmp_path / "older.py", tmp_path / "seen"
    script.write_text(STDIO_SERVER)
    argv = [sys.executable, str(script), version, str(seen), json.dumps(GROW), json.dumps(FRESH)]
    catalog = await connect(f"mcp_servers: [{{name: old, command: {json.dumps(argv)}}}]")
    await grow_and_see_fresh(catalog)
    methods = seen.read_text().split()
    assert methods[:2] == ["server/discover", "initialize"]  # the 2026 probe, refused
    assert "subscriptions/listen" not in methods
    assert methods.count("tools/list") == 2


async def test_http_list_changed_unasked_on_the_get_stream(
    older_http: OlderHttpServer, connect: Connect
) -> None:
    catalog = await connect(f"mcp_servers: [{{name: old, url: '{older_http.url}'}}]")
    async with asyncio.timeout(WAIT_S):
        await older_http.streaming.wait()
    await grow_and_see_fresh(catalog)
    assert older_http.methods[:2] == ["server/discover", "initialize"]
    assert "subscriptions/listen" not in older_http.methods
    assert older_http.methods.count("tools/list") == 2
