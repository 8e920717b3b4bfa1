"""Shared fixtures for model-client tests over real HTTP on loopback.

``serve(policy)`` starts a ``ScriptedServer`` on a free port (stopped after the test);
``http`` is one ``httpx.AsyncClient`` (closed after the test). ``until`` lets the event
loop run until a condition holds, counting loop turns instead of sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import DEFAULT_CHUNKS, Policy
from bot.llm.retry import RetryPolicy

FAST_RETRY = RetryPolicy(base_s=0.0)
"""Three tries, no backoff: retries happen at once."""

HANG_GUARD_S = 5.0
"""For ``asyncio.timeout``: turns a hang into a failure; nothing measures time."""

Serve = Callable[..., Awaitable[ScriptedServer]]


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(10.0)) as client:
        yield client


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(policy, chunks=4, server_class=ScriptedServer)`` → a started server."""
    servers: list[ScriptedServer] = []

    async def start(
        policy: Policy,
        *,
        chunks: int = DEFAULT_CHUNKS,
        server_class: type[ScriptedServer] = ScriptedServer,
    ) -> ScriptedServer:
        server = await server_class(policy, chunks=chunks).start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


async def until(predicate: Callable[[], bool], *, turns: int = 100_000) -> None:
    """Let the event loop run until ``predicate()`` holds, at most ``turns`` turns.

    For conditions nothing signals (a server noticing a client left): each turn lets
    pending I/O callbacks run once. No clock is involved.
    """
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"condition still false after {turns} event-loop turns")
