"""One MCP server: connect, list tools, call, restart after it died, close.

The SDK's ``Client`` is an async context whose task group must be entered and left by
one task, so each connection has an owner task that enters it, publishes the client
and waits to be told to stop; calls come from any job's task. Every SDK failure is
translated here, once, into a ``ToolError`` naming the server (``McpDown``), which the
one tool path turns into an ``Error:`` result.

stdio servers are started by ``stdio.py`` in their own session (process group) with
the environment built here: ``PATH``, ``HOME``, ``LANG`` as for command tools plus the
entry's ``env`` (``${NAME}`` expanded from the bot's environment), nothing else.
Closing stops the child and its group (stdin closed, SIGTERM, SIGKILL, all bounded).
A connection that broke is reconnected by the next call; consecutive failures to
connect wait ``1, 2, 4 … MAX_BACKOFF_S`` seconds between attempts, and a call that
comes before the next attempt is due is answered at once with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from bot.errors import ToolError
from tools.command import DEFAULT_LANG, DEFAULT_PATH, EnvRef, check_env, parse_env_value
from tools.mcp.stdio import stdio_transport
from tools.spec import McpServerSpec

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0  # start + initialize + the first tools/list
CLOSE_TIMEOUT_S = 10.0  # the SDK's own stop is bounded (about 6 s); this is a backstop
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
MAX_LIST_PAGES = 20
MAX_TOOLS = 500
MAX_REASON_CHARS = 300
CLIENT_INFO = mcp_types.Implementation(name="opsloop", version="0.1.0")


class McpDown(ToolError):
    """The server is unreachable, hung or broke the protocol."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0])
    if isinstance(exc, MCPError):
        text = f"error {exc.code}: {exc.error.message}"
    elif isinstance(exc, ValidationError):
        text = "broke the protocol (a message that is not valid MCP)"
    elif isinstance(exc, TimeoutError):
        text = "did not answer in time"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = " ".join(text.split())
    return text[:MAX_REASON_CHARS]


def expand(template: str, environ: Mapping[str, str], *, where: str) -> str:
    """A value with ``${NAME}`` references expanded; ``ValueError`` if one is not set."""
    chunks: list[str] = []
    for part in parse_env_value(template):
        if isinstance(part, EnvRef):
            value = environ.get(part.name)
            if value is None:
                raise ValueError(f"{where}: ${{{part.name}}} is not set in the bot's environment")
            chunks.append(value)
        else:
            chunks.append(part)
    return "".join(chunks)


def child_environment(spec: McpServerSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The stdio child's environment: what command tools get, plus the entry's ``env``."""
    env = {
        "PATH": environ.get("PATH") or DEFAULT_PATH,
        "LANG": environ.get("LANG") or DEFAULT_LANG,
    }
    if environ.get("HOME"):
        env["HOME"] = environ["HOME"]
    check_env(spec.env)
    for key, value in spec.env.items():
        env[key] = expand(value, environ, where=f"env.{key}")
    return env


class McpConnection:
    """The live connection to one server, shared by all of its tools."""

    def __init__(
        self,
        spec: McpServerSpec,
        *,
        environ: Mapping[str, str] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._connect_timeout = connect_timeout
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._next_attempt = 0.0
        self._down_reason: str | None = None
        self._closed = False
        self.starts = 0  # how many times a connection was established

    # -- connecting -----------------------------------------------------------------

    def _transport(self) -> Any:
        spec = self.spec
        if spec.command is not None:
            return stdio_transport(
                spec.command,
                env=child_environment(spec, self._environ),
                cwd=spec.cwd,
                name=spec.name,
            )
        assert spec.url is not None
        headers = {
            key: expand(value, self._environ, where=f"headers.{key}")
            for key, value in spec.headers.items()
        }
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(spec.timeout))
        return _HttpTransport(spec.url, http)

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            closed = asyncio.Event()
            transport = _watched(self._transport(), closed)
            client = Client(transport, mode="auto", client_info=CLIENT_INFO, cache=None)
            async with client:
                if not ready.done():
                    ready.set_result(client)
                await _first(stop, closed)
                if not stop.is_set():
                    # The server went away between calls: the next call starts it again.
                    self._down_reason = "the server closed the connection"
                    log.warning("mcp server %r: %s", self.name, self._down_reason)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpDown("stopped"))
            elif not stop.is_set():
                self._down_reason = _reason(exc)
                log.warning("mcp server %r: connection lost: %s", self.name, self._down_reason)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self._stop is stop:
                self._client = None

    async def _connect(self) -> Client:
        stop = asyncio.Event()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        owner = asyncio.create_task(self._own(ready, stop), name=f"mcp:{self.name}")
        self._owner, self._stop = owner, stop
        try:
            async with asyncio.timeout(self._connect_timeout):
                client = await asyncio.shield(ready)
        except BaseException as exc:
            await self._end(owner, stop)
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: its failure is reported below, not at GC
            if isinstance(exc, TimeoutError):
                raise McpDown(
                    f"mcp server {self.name!r} did not finish initialize within "
                    f"{self._connect_timeout:g}s"
                ) from None
            if isinstance(exc, Exception):
                raise McpDown(f"mcp server {self.name!r} could not start: {_reason(exc)}") from None
            raise
        self._client = client
        self.starts += 1
        return client

    async def start(self) -> list[mcp_types.Tool]:
        """Connect and list the server's tools (at most ``MAX_TOOLS``); ``McpDown``."""
        async with self._lock:
            client = await self._connect()
            try:
                async with asyncio.timeout(self._connect_timeout):
                    tools: list[mcp_types.Tool] = []
                    cursor: str | None = None
                    for _ in range(MAX_LIST_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if cursor is None or len(tools) >= MAX_TOOLS:
                            break
            except Exception as exc:
                await self._drop()
                raise McpDown(
                    f"mcp server {self.name!r} could not list its tools: {_reason(exc)}"
                ) from None
            if len(tools) > MAX_TOOLS:
                log.warning("mcp server %r: only the first %d tools are used", self.name, MAX_TOOLS)
            return tools[:MAX_TOOLS]

    async def _ensure(self) -> Client:
        """The live client, reconnecting (with backoff) if the last one broke."""
        if self._client is not None and self._owner is not None and not self._owner.done():
            return self._client
        if self._closed:
            raise McpDown(f"mcp server {self.name!r} is closed")
        async with self._lock:
            if self._client is not None and self._owner is not None and not self._owner.done():
                return self._client
            now = time.monotonic()
            if now < self._next_attempt:
                raise McpDown(
                    f"mcp server {self.name!r} is down ({self._down_reason or 'not connected'});"
                    f" next restart attempt in {self._next_attempt - now:.0f}s"
                )
            await self._drop()
            try:
                client = await self._connect()
            except McpDown as exc:
                self._failures += 1
                backoff = min(FIRST_BACKOFF_S * 2 ** (self._failures - 1), MAX_BACKOFF_S)
                self._next_attempt = time.monotonic() + backoff
                self._down_reason = str(exc).removeprefix(f"mcp server {self.name!r} ")
                raise
            log.info("mcp server %r: reconnected", self.name)
            self._failures, self._down_reason = 0, None
            return client

    async def ended(self) -> None:
        """Until the current connection ends (the server went away, or ``aclose``)."""
        owner = self._owner
        if owner is not None:
            await asyncio.wait({owner})

    # -- calling --------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        time_limit: float,
        meta: dict[str, Any] | None = None,
        progress: ProgressFnT | None = None,
    ) -> mcp_types.CallToolResult:
        """One ``tools/call`` bounded by ``time_limit``; ``McpDown`` for anything but a
        result."""
        timeout = time_limit
        client = await self._ensure()
        try:
            async with asyncio.timeout(timeout):
                return await client.call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=timeout,
                    progress_callback=progress,
                    meta=meta,  # type: ignore[arg-type]
                )
        except TimeoutError:
            raise McpDown(f"mcp server {self.name!r} did not answer within {timeout:g}s") from None
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                await self._lost("closed the connection")
                raise McpDown(
                    f"mcp server {self.name!r} closed the connection during the call"
                ) from None
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpDown(
                    f"mcp server {self.name!r} did not answer within {timeout:g}s"
                ) from None
            raise McpDown(f"mcp server {self.name!r}: {_reason(exc)}") from None
        except (ValidationError, ValueError) as exc:
            raise McpDown(f"mcp server {self.name!r} {_reason(exc)}") from None
        except (OSError, httpx2.HTTPError, ExceptionGroup) as exc:
            await self._lost(_reason(exc))
            raise McpDown(f"mcp server {self.name!r} is unreachable: {_reason(exc)}") from None

    async def _lost(self, reason: str) -> None:
        self._down_reason = reason
        async with self._lock:
            await self._drop()

    # -- stopping -------------------------------------------------------------------

    async def _end(self, owner: asyncio.Task[None], stop: asyncio.Event) -> None:
        stop.set()
        done, _ = await asyncio.wait({owner}, timeout=CLOSE_TIMEOUT_S)
        if not done:
            owner.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(owner, CLOSE_TIMEOUT_S)
        elif not owner.cancelled() and owner.exception() is not None:
            log.debug("mcp server %r: stopped with %s", self.name, owner.exception())

    async def _drop(self) -> None:
        owner, stop = self._owner, self._stop
        self._client, self._owner, self._stop = None, None, None
        if owner is not None and stop is not None:
            await self._end(owner, stop)

    async def aclose(self) -> None:
        """Stop the server (a stdio child and its group) and refuse further calls."""
        self._closed = True
        await self._drop()


async def _first(*events: asyncio.Event) -> None:
    """Until one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


@contextlib.asynccontextmanager
async def _watched(transport: Any, closed: asyncio.Event) -> AsyncIterator[Any]:
    """``transport``'s streams, with ``closed`` set when the server's side ends (a stdio
    child that exited), so that the owner stops waiting on a dead connection."""
    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def forward() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                closed.set()

        async with anyio.create_task_group() as group:
            group.start_soon(forward)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()
                receive.close()
                send.close()


class _HttpTransport:
    """The streamable HTTP transport with our HTTP client (headers, timeouts)."""

    def __init__(self, url: str, http: httpx2.AsyncClient) -> None:
        self.url, self.http = url, http

    async def __aenter__(self) -> Any:
        self._cm = streamable_http_client(self.url, http_client=self.http)
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._cm.__aexit__(*exc)
        finally:
            await self.http.aclose()
