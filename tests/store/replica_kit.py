"""A master and a replica of the test's own (real redis-servers), and a client of the
master that waits until the replica is linked: for the tests of replicated
acknowledgements (``OPSLOOP_REDIS_MIN_REPLICAS``). Import the fixtures by name."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_replica import ManagedReplica
from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import connect


@pytest.fixture
def master(tmp_path: Path) -> Iterator[ManagedRedis]:
    managed = ManagedRedis(tmp_path / "master").start()
    yield managed
    managed.stop()


@pytest.fixture
def replica(master: ManagedRedis, tmp_path: Path) -> Iterator[ManagedReplica]:
    started = ManagedReplica(master, tmp_path / "replica").start()
    yield started
    started.stop()


@pytest.fixture
async def client(master: ManagedRedis, replica: ManagedReplica) -> AsyncIterator[aioredis.Redis]:
    redis = connect(master.url)
    await replica.linked()
    yield redis
    await redis.aclose()
