"""The ends of a connection's transport: noticing that a server went away, and the
streamable HTTP transport on our own client.

``Ending`` is told, once, why a connection ended; ``watched`` wraps any transport's
streams so that the end of the server's side (a stdio child that exited) tells it. For
streamable HTTP, ``HttpTransport`` runs the SDK's client on our ``httpx2`` client, whose
hooks (``unbounded_read``, ``watch_response``) keep the streams of what a server sends
unasked open however quiet they are, and tell the ``Ending`` when such a stream breaks
off or the server forgets our session (HTTP 404). Used by ``tools.mcp.connection``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client

MCP_METHOD = "mcp-method"  # the request header naming the method (2026-07-28)
LISTEN = "subscriptions/listen"


class Ending:
    """How one connection ended, once it did: whichever side noticed first says why."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.why: str | None = None

    def __call__(self, why: str) -> None:
        if not self.event.is_set():
            self.why = why
            self.event.set()


@contextlib.asynccontextmanager
async def watched(transport: Any, ending: Ending) -> AsyncIterator[Any]:
    """``transport``'s streams, with ``ending`` told when the server's side ends (a stdio
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
                ending("the server closed the connection")

        async with anyio.create_task_group() as group:
            group.start_soon(forward)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()
                receive.close()
                send.close()


class HttpTransport:
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


def unasked(request: httpx2.Request) -> bool:
    """Whether ``request`` opens a stream of what the server sends unasked: the GET
    stream (2025 versions) or a ``subscriptions/listen`` (2026)."""
    return request.method == "GET" or request.headers.get(MCP_METHOD) == LISTEN


async def unbounded_read(request: httpx2.Request) -> None:
    """An httpx2 request hook: such a stream may be quiet for as long as nothing
    changes, so no read timeout ends it (the entry's ``timeout`` would, and the SDK
    does not renew a subscription it lost). All else we send has its own deadline."""
    if unasked(request):
        timeouts = request.extensions.get("timeout")
        if isinstance(timeouts, dict):
            request.extensions = {**request.extensions, "timeout": {**timeouts, "read": None}}


def watch_response(ending: Ending) -> Callable[[httpx2.Response], Awaitable[None]]:
    """An httpx2 response hook telling ``ending`` when the server went away or forgot
    us: a 404 to a request that carried our session id (the spec's "start a new
    session"), or a stream of what the server sends unasked whose body breaks off (the
    server died or the network between us broke; a read timeout is not that: an idle
    stream would time out, were its read not unbounded). Those are the ``unasked``
    streams; a call's own answer stream is left to the SDK, which resumes it if the
    server allows."""

    async def hook(response: httpx2.Response) -> None:
        request = response.request
        if response.status_code == 404 and MCP_SESSION_ID in request.headers:
            ending("it no longer knows our session (HTTP 404)")
            return
        stream = response.stream
        ok = response.status_code == 200
        if ok and unasked(request) and isinstance(stream, httpx2.AsyncByteStream):
            response.stream = BreakWatch(stream, ending)

    return hook


class BreakWatch(httpx2.AsyncByteStream):
    """An event stream's body that tells ``ending`` when it breaks off."""

    def __init__(self, stream: httpx2.AsyncByteStream, ending: Ending) -> None:
        self._stream, self._ending = stream, ending

    @property
    def elapsed(self) -> Any:  # httpx2 reads it back from ``response.stream``
        return getattr(self._stream, "elapsed", None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._stream.__aiter__()
        try:
            async for chunk in chunks:
                yield chunk
        except httpx2.TimeoutException:
            raise
        except httpx2.TransportError as exc:
            self._ending(f"its event stream broke off ({type(exc).__name__})")
            raise
        finally:
            if isinstance(chunks, AsyncGenerator):
                await chunks.aclose()

    async def aclose(self) -> None:
        await self._stream.aclose()
