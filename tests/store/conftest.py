"""A real redis-server per test session (AOF, appendfsync always), flushed per test.

``redis`` is a connected client; ``server`` the managed process (tests that kill or
restart Redis use their own ``fresh_server`` so the shared one stays up).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import connect
from bot.store.keys import Keys, Thread


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedRedis]:
    managed = ManagedRedis(tmp_path_factory.mktemp("redis")).start()
    yield managed
    managed.stop()


@pytest.fixture
async def redis(server: ManagedRedis) -> AsyncIterator[aioredis.Redis]:
    client = connect(server.url)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ManagedRedis]:
    """A server of the test's own, for killing and restarting."""
    managed = ManagedRedis(tmp_path / "redis").start()
    yield managed
    managed.stop()


@pytest.fixture
def keys() -> Keys:
    return Keys("test:")


@pytest.fixture
def thread() -> Thread:
    return Thread("C123", "1700000000.000100")
